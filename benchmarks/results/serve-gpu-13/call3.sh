#!/usr/bin/env bash
# Call 2's failing rider test on CUDA, with its traceback; then the served loads on the Qwen2.5-0.5B shape with
# chat steps riding embedding batches, and the mixed load again on a server taking turns (--no-chat-riding). At this
# commit riding was the default and --turns-loads ran a --no-chat-riding server; now riding is opt-in (--chat-riding)
# and the flag is --riding-loads.
set -uo pipefail
source benchmarks/results/device-setup.sh
t0=$SECONDS
timeout 90 python3 -P -m pytest -q -p no:cacheprovider tests/test_riding.py tests/test_serve_batches.py \
  -k "gpu or cuda" --tb=short 2>&1 | grep -v "^0\.\|s call \|s setup " | head -120 | tee "$OUT/call3-tests.txt"
echo "tests: $((SECONDS - t0)) s"
cd /tmp
timeout $((560 - SECONDS + t0)) python3 "$SRC/benchmarks/bench_serve_gpu.py" --arch qwen2.5-0.5b \
  --spec "F* | M0B*12" --tokenizer "$SRC/.gpu/tok" --workers 8 --seconds 8 \
  --loads 64x1 "64x1 + 8 chats" "1 chat" --turns-loads "64x1 + 8 chats" \
  --json "$OUT/call3-qwen2.5-0.5b.json" 2>&1 | grep -v "Loading weights\|Writing model\|^  workers=" \
  | tee "$OUT/call3-qwen2.5-0.5b.md"
echo "qwen: $((SECONDS - t0)) s"
