#!/usr/bin/env bash
# Issue 29: this session's serving code (this working tree) on the Llama-3.2-1B shape, alone (no comparison run:
# the device time left). From the checkout root, wheels in .whl/.
set -uo pipefail
source benchmarks/results/device-setup.sh
cd /tmp
PYTHONPATH=/tmp/pkg:/tmp/site timeout 340 python3 "$SRC/benchmarks/bench_serve_gpu.py" \
  --arch llama-1b --spec "F* | M0B*8" --tokenizer "$SRC/.gpu/tok" --workers 8 --seconds 8 \
  --loads 64x1 16x16 "64x1 + 8 chats" "1 chat" --json "$OUT/call5-llama-1b.json" 2>&1 \
  | grep -v "Loading weights\|Writing model\|^  workers=" | tee "$OUT/call5-llama-1b.md"
