#!/usr/bin/env bash
# call3.sh's Qwen2.5-0.5B part again, with the time it needs (in call 3 its 250 s ran out before the loads' table).
set -uo pipefail
source benchmarks/results/device-setup.sh
t0=$SECONDS
cd /tmp
timeout 420 python3 "$SRC/benchmarks/bench_serve_gpu.py" --arch qwen2.5-0.5b --spec "F* | M0B*12" \
  --tokenizer "$SRC/.gpu/tok" --workers 8 --seconds 8 --loads 64x1 "64x1 + 8 chats" "1 chat" "16 chats" \
  --json "$OUT/call4-qwen2.5-0.5b.json" 2>&1 | grep -v "Loading weights\|Writing model\|^  workers=" \
  | tee "$OUT/call4-qwen2.5-0.5b.md"
echo "qwen: $((SECONDS - t0)) s"
