#!/usr/bin/env bash
# Issue 29: where an embedding batch's time goes (GPU busy against wall), then 64 x 1 and 16 x 16 with the
# front-ends of a241ee3 (httptools, no dependency, no telemetry check) at 4 and 8 front-ends, and e764879's
# code (h11) at 4 front-ends as the baseline, on the same machine.
set -uo pipefail
source benchmarks/results/device-setup.sh
rm -rf /tmp/pkgold && mkdir -p /tmp/pkgold && cp -r .gpu/old/nosink /tmp/pkgold/nosink
for d in layerspec models corpus evals; do cp -r .gpu/old/$d /tmp/pkgold/nosink/$d; done
t0=$SECONDS
cd /tmp
timeout 150 python3 -P "$SRC/benchmarks/results/serve-gpu-4/batch-probe.py" --arch qwen2.5-0.5b --tokenizer "$SRC/.gpu/tok" 2>&1 \
  | grep -v "Loading weights\|Writing model\|warn" | tee "$OUT/call1-batch-probe-qwen2.5-0.5b.md"
echo "probe: $((SECONDS - t0)) s"
timeout $((330 - SECONDS + t0)) python3 "$SRC/benchmarks/bench_serve_gpu.py" --arch qwen2.5-0.5b --spec "F* | M0B*12" \
  --tokenizer "$SRC/.gpu/tok" --workers 4 8 --seconds 8 --loads 64x1 16x16 \
  --json "$OUT/call1-new-qwen2.5-0.5b.json" 2>&1 | grep -v "Loading weights\|Writing model" | tee "$OUT/call1-new-qwen2.5-0.5b.md"
echo "new: $((SECONDS - t0)) s"
PYTHONPATH=/tmp/pkgold:/tmp/site timeout $((520 - SECONDS + t0)) python3 "$SRC/benchmarks/bench_serve_gpu.py" --arch qwen2.5-0.5b \
  --spec "F* | M0B*12" --tokenizer "$SRC/.gpu/tok" --workers 4 --seconds 8 --loads 64x1 16x16 \
  --json "$OUT/call1-old-qwen2.5-0.5b.json" 2>&1 | grep -v "Loading weights\|Writing model" | tee "$OUT/call1-old-qwen2.5-0.5b.md"
echo "old: $((SECONDS - t0)) s"
