#!/usr/bin/env bash
# Issue 29/28: the host time of an embedding batch in the steady state (the same 64 texts, one graph replayed).
set -uo pipefail
source benchmarks/results/device-setup.sh
cd /tmp
timeout 150 python3 -P "$SRC/benchmarks/results/serve-gpu-4/batch-probe.py" --profile --same --arch qwen2.5-0.5b --tokenizer "$SRC/.gpu/tok" 2>&1 \
  | grep -v "Loading weights\|Writing model" > "$OUT/call5-batch-profile-same-qwen2.5-0.5b.txt"
head -3 "$OUT/call5-batch-profile-same-qwen2.5-0.5b.txt"
