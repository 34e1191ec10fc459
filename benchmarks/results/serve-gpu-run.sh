#!/usr/bin/env bash
# Issue 29 on a lent GPU machine: `nosink serve` under load beside offline encode(), one architecture per call.
#
# Needs, beside the checkout: the wheels in .whl/ that the machine lacks (transformers 5.24, fastapi, uvicorn,
# orjson, uvloop and their needs; see the closing note) and a Qwen2.5 tokenizer folder in .gpu/tok
# (weights never travel: the model is random at the real shape). Run from the checkout root:
#
#     bash benchmarks/results/serve-gpu-run.sh qwen2.5-0.5b "F* | M0B*12" "4 0"
#     bash benchmarks/results/serve-gpu-run.sh llama-1b "F* | M0B*8" "4"
set -euo pipefail
ARCH=$1 SPEC=$2 WORKERS=$3 SECONDS_EACH=${SECONDS_EACH:-15}
SRC=$(pwd)
OUT=${OUT:-/tmp/serve-gpu-out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$SRC"/.whl/*.whl
rm -rf /tmp/pkg && mkdir -p /tmp/pkg && cp -r "$SRC/nosink" /tmp/pkg/nosink
for d in layerspec models corpus evals; do cp -r "$SRC/$d" "/tmp/pkg/nosink/$d"; done
export PYTHONPATH=/tmp/pkg:/tmp/site PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
cd /tmp  # not the checkout: nosink comes from /tmp/pkg, in this process and in the server's
python3 -c "import torch, transformers, fastapi, uvicorn, orjson, os; print(torch.cuda.get_device_name(), torch.__version__, transformers.__version__, fastapi.__version__, uvicorn.__version__, os.cpu_count(), 'cpus')"
git -C "$SRC" log -1 --format='commit %H' 2>/dev/null || true
# shellcheck disable=SC2086
python3 "$SRC/benchmarks/bench_serve_gpu.py" --arch "$ARCH" --spec "$SPEC" --tokenizer "$SRC/.gpu/tok" \
    --workers $WORKERS --seconds "$SECONDS_EACH" --json "$OUT/$ARCH.json" 2>&1 | tee "$OUT/$ARCH.md"
