#!/usr/bin/env bash
# Issue 29: call1.sh's loads with 588bff0's code (.gpu/old: before the batch in flight), on the same machine.
set -uo pipefail
source benchmarks/results/device-setup.sh
rm -rf /tmp/pkgold && mkdir -p /tmp/pkgold && cp -r .gpu/old/nosink /tmp/pkgold/nosink
for d in layerspec models corpus evals; do cp -r .gpu/old/$d /tmp/pkgold/nosink/$d; done
t0=$SECONDS
cd /tmp
PYTHONPATH=/tmp/pkgold:/tmp/site timeout 560 python3 "$SRC/benchmarks/bench_serve_gpu.py" --arch qwen2.5-0.5b \
  --spec "F* | M0B*12" --tokenizer "$SRC/.gpu/tok" --workers 8 --seconds 8 --loads 64x1 16x16 "64x1 + 8 chats" \
  --json "$OUT/call2-old-qwen2.5-0.5b.json" 2>&1 | grep -v "Loading weights\|Writing model" | tee "$OUT/call2-old-qwen2.5-0.5b.md"
echo "bench: $((SECONDS - t0)) s"
