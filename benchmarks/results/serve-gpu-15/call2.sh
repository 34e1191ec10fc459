#!/usr/bin/env bash
# Issue 29: chat steps on their own CUDA stream (--chat-stream) against taking turns, mixed load and one chat alone,
# each load run unmeasured for 5 s first; one shape per call (ARCH SPEC LIMIT as arguments).
set -uo pipefail
source benchmarks/results/device-setup.sh
name=$1 spec=$2 limit=$3
cd /tmp
timeout "$limit" python3 "$SRC/benchmarks/bench_serve_gpu.py" --arch "$name" --spec "$spec" \
  --tokenizer "$SRC/.gpu/tok" --workers 8 --seconds 8 --warm-each 5 \
  --loads "64x1 + 8 chats" "1 chat" --variant chat-stream "64x1 + 8 chats" "1 chat" \
  --json "$OUT/call2-$name.json" > "$OUT/call2-$name.log" 2>&1
grep -v "Loading weights\|Writing model\|^  workers=\|^V1202\|^W1202\|recompiles\]" "$OUT/call2-$name.log" | tail -40
