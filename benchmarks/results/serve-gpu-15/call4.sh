#!/usr/bin/env bash
# Issue 29: --chat-compile's start-up (kv.Rows.warm_up) timed on the GPU, and chats after it, at the Qwen2.5-0.5B shape.
set -uo pipefail
source benchmarks/results/device-setup.sh
timeout "${1:-200}" python3 -u benchmarks/results/serve-gpu-15/warm-up-gpu.py --arch qwen2.5-0.5b \
  > "$OUT/call4-warm-up.txt" 2>&1
grep -v "^W1\|^V1" "$OUT/call4-warm-up.txt" | tail -8
