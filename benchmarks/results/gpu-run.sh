#!/usr/bin/env bash
# Issue 13 on the lent GPU machine, one command, under 9 minutes on one H100; every output lands in $OUT.
#
# Needs, beside the code: a transformers 5.24 wheel in $SRC/whl/ (the machine has 5.17) and a tokenizer
# folder of Qwen2.5 in $SRC/tok/ (for the encode() rows; weights never travel: models are random at real
# shapes). $SRC (default .gpu, a git-ignored copy carried to the machine) holds nosink/, layerspec/, models/,
# evals/, benchmarks/ and tests/tiny.py as in the commit named in the results page. Run from the checkout root:
#
#     CUDA_VISIBLE_DEVICES=0 bash .gpu/benchmarks/results/gpu-run.sh
set -euo pipefail
SRC=$(cd "${SRC:-.gpu}" && pwd)
OUT=${OUT:-/tmp/gpu-run-out}
mkdir -p "$OUT"
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0} PYTHONUNBUFFERED=1
rm -rf /tmp/pkg && mkdir -p /tmp/pkg
cp -r "$SRC/nosink" /tmp/pkg/nosink
for d in layerspec models evals; do cp -r "$SRC/$d" "/tmp/pkg/nosink/$d"; done
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$SRC"/whl/*.whl
export PYTHONPATH=/tmp/pkg:/tmp/site
cd /tmp  # not the checkout: nosink comes from /tmp/pkg
B="python3 $SRC/benchmarks/bench_encoder.py --device cuda --dtype bfloat16"
python3 -c "import torch, transformers; print(torch.cuda.get_device_name(), torch.__version__, transformers.__version__)" \
    | tee "$OUT/versions.txt"
t0=$SECONDS
python3 "$SRC/benchmarks/check_fast_path.py" --device cuda 2>&1 | tee "$OUT/check.txt"
echo "check: $((SECONDS - t0)) s"
$B --encode --arch qwen2.5-0.5b --batch 128 --texts 4096 --repeats 5 --tokenizer "$SRC/tok" 2>&1 | tee "$OUT/encode.md"
echo "encode: $((SECONDS - t0)) s"
$B --streams --archs llama3-8b-8l qwen2.5-0.5b --shapes 512x32 2048x8 --repeats 5 --batches 2 2>&1 \
    | tee "$OUT/streams.md"
echo "streams: $((SECONDS - t0)) s"
$B --fast-vs-dense --repeats 5 --batches 2 --markdown "$OUT/fast-vs-dense.md" 2>&1 | tee "$OUT/fast-vs-dense.log"
echo "fast-vs-dense: $((SECONDS - t0)) s"
timeout 240 $B --compiled --compile-archs qwen2.5-0.5b --compile-shapes 512x32 2048x8 --repeats 5 --batches 2 2>&1 \
    | tee "$OUT/compiled.md"
echo "total: $((SECONDS - t0)) s"
