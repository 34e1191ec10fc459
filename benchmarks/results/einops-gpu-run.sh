#!/usr/bin/env bash
# einops in models/attention.py (issue 27, item 6) against its parent commit, in one call on one lent GPU.
#
# $SRC (default .gpu-einops, a git-ignored folder carried to the machine) holds old/ and new/ (each a
# `git archive` of one commit: the parent and the einops commit) and whl/ (transformers 5.24 and einops 0.8.2
# wheels: the machine has transformers 5.17). Each tree runs the attention kernels alone (--kernels) and the
# fast-vs-dense table; the kernels run twice more, in the other order, to show the noise; then the float32
# exactness check of the fast path (check_fast_path.py) on the new tree. Run from the checkout root:
#
#     CUDA_VISIBLE_DEVICES=0 bash .gpu-einops/new/benchmarks/results/einops-gpu-run.sh
set -euo pipefail
SRC=$(cd "${SRC:-.gpu-einops}" && pwd)
OUT=${OUT:-/tmp/einops-gpu-run-out}
mkdir -p "$OUT"
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0} PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$SRC"/whl/*.whl
for tree in old new; do
    rm -rf "/tmp/$tree" && mkdir -p "/tmp/$tree"
    cp -r "$SRC/$tree/nosink" "/tmp/$tree/nosink"
    for d in layerspec models evals; do cp -r "$SRC/$tree/$d" "/tmp/$tree/nosink/$d"; done
done
cd /tmp  # not the checkout: nosink comes from /tmp/old or /tmp/new
run() {  # run TREE ARGS...: the benchmark of one tree
    local tree=$1
    shift
    PYTHONPATH="/tmp/$tree:/tmp/site" python3 "$SRC/$tree/benchmarks/bench_encoder.py" --device cuda --dtype bfloat16 "$@"
}
PYTHONPATH=/tmp/new:/tmp/site python3 -c "import torch, transformers, einops; print(torch.cuda.get_device_name(), \
torch.__version__, transformers.__version__, einops.__version__)" | tee "$OUT/versions.txt"
t0=$SECONDS
SHAPES=(--shapes 512x32 2048x8 --repeats 5 --batches 2)
for tree in old new; do
    run $tree --kernels --shapes 512x32 2048x8 2>&1 | tee "$OUT/kernels-$tree.md"
    run $tree --fast-vs-dense "${SHAPES[@]}" --markdown "$OUT/fast-vs-dense-$tree.md" 2>&1 | tail -n 3
    echo "$tree: $((SECONDS - t0)) s"
done
for tree in new old; do
    run $tree --kernels --shapes 512x32 2048x8 2>&1 | tee "$OUT/kernels-$tree-again.md"
done
PYTHONPATH=/tmp/new:/tmp/site python3 "$SRC/new/benchmarks/check_fast_path.py" --device cuda 2>&1 | tee "$OUT/check-new.txt"
echo "total: $((SECONDS - t0)) s"
