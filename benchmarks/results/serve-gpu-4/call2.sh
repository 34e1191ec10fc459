#!/usr/bin/env bash
# Issue 29/28: where the host time of an embedding batch goes (64 rows, a241ee3's code).
set -uo pipefail
source benchmarks/results/device-setup.sh
cd /tmp
timeout 200 python3 -P "$SRC/benchmarks/results/serve-gpu-4/batch-probe.py" --profile --arch qwen2.5-0.5b --tokenizer "$SRC/.gpu/tok" 2>&1 \
  | grep -v "Loading weights\|Writing model" > "$OUT/call2-batch-profile-qwen2.5-0.5b.txt"
tail -5 "$OUT/call2-batch-profile-qwen2.5-0.5b.txt"
