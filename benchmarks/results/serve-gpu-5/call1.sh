#!/usr/bin/env bash
# Issue 29: a batch in flight (this commit). The engine alone, in flight off and on; then the serving loads with this
# commit's code at 8 front-ends. call2.sh runs the same loads with 588bff0's code on the same (still warm) machine.
set -uo pipefail
source benchmarks/results/device-setup.sh
t0=$SECONDS
cd /tmp
timeout 150 python3 -P "$SRC/benchmarks/results/serve-gpu-5/flight-probe.py" --tokenizer "$SRC/.gpu/tok" 2>&1 \
  | grep -v "Loading weights\|Writing model\|warn" | tee "$OUT/call1-flight-probe-qwen2.5-0.5b.md"
echo "probe: $((SECONDS - t0)) s"
timeout $((570 - SECONDS + t0)) python3 "$SRC/benchmarks/bench_serve_gpu.py" --arch qwen2.5-0.5b --spec "F* | M0B*12" \
  --tokenizer "$SRC/.gpu/tok" --workers 8 --seconds 8 --loads 64x1 16x16 "64x1 + 8 chats" \
  --json "$OUT/call1-new-qwen2.5-0.5b.json" 2>&1 | grep -v "Loading weights\|Writing model" | tee "$OUT/call1-new-qwen2.5-0.5b.md"
echo "bench: $((SECONDS - t0)) s"
