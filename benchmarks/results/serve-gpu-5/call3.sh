#!/usr/bin/env bash
# Issue 29: call1.sh's mixed load regressed (chat steps waited for the batch in flight and were charged with it):
# a chat step now first answers the batch in flight. The loads again with this commit's code, same machine.
set -uo pipefail
source benchmarks/results/device-setup.sh
t0=$SECONDS
cd /tmp
timeout 400 python3 "$SRC/benchmarks/bench_serve_gpu.py" --arch qwen2.5-0.5b --spec "F* | M0B*12" \
  --tokenizer "$SRC/.gpu/tok" --workers 8 --seconds 8 --loads 64x1 "64x1 + 8 chats" \
  --json "$OUT/call3-new-qwen2.5-0.5b.json" 2>&1 | grep -v "Loading weights\|Writing model" | tee "$OUT/call3-new-qwen2.5-0.5b.md"
echo "bench: $((SECONDS - t0)) s"
