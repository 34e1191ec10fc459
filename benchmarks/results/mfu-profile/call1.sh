#!/usr/bin/env bash
# Issue 28 on a lent H200: where encode() of short texts spends the GPU's time, both shapes, batch 128 and 512.
# From the checkout root, wheels in .whl/, the Qwen2.5 tokenizer in .gpu/tok.
set -uo pipefail
source benchmarks/results/device-setup.sh
t0=$SECONDS
timeout 560 python3 -P benchmarks/results/mfu-profile/probe.py --tokenizer .gpu/tok --archs llama-1b qwen2.5-0.5b \
    --json "$OUT/probe.json" 2>&1 | grep -v "Warning\|warn(" | tee "$OUT/probe.md"
echo "all: $((SECONDS - t0)) s"
