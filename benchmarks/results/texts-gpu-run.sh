#!/usr/bin/env bash
# Issue 28 on a lent GPU machine: the CUDA checks of the fast path and its graphs, then bench_texts_gpu.py.
#
# Needs, beside the checkout: the wheels in .whl/ that the machine lacks (transformers 5.24; pytest and
# hypothesis for the CUDA tests) and a Qwen2.5 tokenizer folder in .gpu/tok (weights never travel: models are
# random at real shapes). Run from the checkout root; STEPS picks what runs (default: all of it):
#
#     STEPS="check bench" ARCHS="qwen2.5-0.5b llama-1b" bash benchmarks/results/texts-gpu-run.sh
set -euo pipefail
SRC=$(pwd)
OUT=${OUT:-/tmp/texts-gpu-out}
STEPS=${STEPS:-"check bench forward"}
ARCHS=${ARCHS:-"qwen2.5-0.5b llama-1b"}
TEXTS=${TEXTS:-8192} REPEATS=${REPEATS:-5}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$SRC"/.whl/*.whl
rm -rf /tmp/pkg && mkdir -p /tmp/pkg && cp -r "$SRC/nosink" /tmp/pkg/nosink
for d in layerspec models corpus evals; do cp -r "$SRC/$d" "/tmp/pkg/nosink/$d"; done
export PYTHONPATH=/tmp/pkg:/tmp/site PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
python3 -c "import torch, transformers; print(torch.cuda.get_device_name(), torch.__version__, transformers.__version__)" \
    | tee "$OUT/versions.txt"
t0=$SECONDS
if [[ " $STEPS " == *" check "* ]]; then
    # -P: the checkout's own nosink/ (without its subpackages) must not shadow /tmp/pkg
    python3 -P -m pytest -q -p no:cacheprovider tests/test_graphs.py 2>&1 | tail -15 | tee "$OUT/test-graphs.txt"
    python3 -P "$SRC/benchmarks/check_fast_path.py" --device cuda 2>&1 | tee "$OUT/check.txt"
    echo "check: $((SECONDS - t0)) s"
fi
if [[ " $STEPS " == *" bench "* ]]; then
    for arch in $ARCHS; do
        python3 -P "$SRC/benchmarks/bench_texts_gpu.py" --arch "$arch" --tokenizer "$SRC/.gpu/tok" --texts "$TEXTS" \
            --repeats "$REPEATS" --json "$OUT/texts-$arch.json" 2>&1 | grep -v Warning | tee "$OUT/texts-$arch.md"
        echo "bench $arch: $((SECONDS - t0)) s"
    done
fi
if [[ " $STEPS " == *" forward "* ]]; then
    python3 -P "$SRC/benchmarks/bench_encoder.py" --device cuda --dtype bfloat16 --fast-vs-dense --repeats 5 \
        --batches 2 --archs llama3-8b-8l qwen2.5-0.5b llama-1b --markdown "$OUT/fast-vs-dense.md" 2>&1 \
        | tee "$OUT/fast-vs-dense.log"
    echo "forward: $((SECONDS - t0)) s"
fi
