#!/usr/bin/env bash
# Issue 29: after the batch is normalised on the GPU (this commit): the batch probe, then the serving loads at
# 4 and 8 front-end processes.
set -uo pipefail
source benchmarks/results/device-setup.sh
t0=$SECONDS
cd /tmp
timeout 120 python3 -P "$SRC/benchmarks/results/serve-gpu-4/batch-probe.py" --arch qwen2.5-0.5b --tokenizer "$SRC/.gpu/tok" 2>&1 \
  | grep -v "Loading weights\|Writing model\|warn" | tee "$OUT/call3-batch-probe-qwen2.5-0.5b.md"
echo "probe: $((SECONDS - t0)) s"
timeout $((560 - SECONDS + t0)) python3 "$SRC/benchmarks/bench_serve_gpu.py" --arch qwen2.5-0.5b --spec "F* | M0B*12" \
  --tokenizer "$SRC/.gpu/tok" --workers 4 8 --seconds 8 --loads 64x1 16x16 "64x1 + 8 chats" "1 chat" \
  --json "$OUT/call3-qwen2.5-0.5b.json" 2>&1 | grep -v "Loading weights\|Writing model" | tee "$OUT/call3-qwen2.5-0.5b.md"
echo "bench: $((SECONDS - t0)) s"
