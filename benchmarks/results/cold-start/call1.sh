#!/usr/bin/env bash
# Issue 57, call 1 (code of the commit before the new policy): the capture probe, then the cold-start benchmark, at the
# Qwen2.5-0.5B shape. From the checkout root, wheels in .whl/, the Qwen2.5 tokenizer in .gpu/tok.
set -uo pipefail
source benchmarks/results/device-setup.sh
t0=$SECONDS
timeout 280 python3 -P benchmarks/results/cold-start/probe.py --arch qwen2.5-0.5b --tokenizer .gpu/tok \
  > "$OUT/call1-probe-qwen.txt" 2>&1
grep -v "^W1\|^V1\|Warning" "$OUT/call1-probe-qwen.txt" | grep -v "^-\|^Name\|^Self" | head -60
echo "probe: $((SECONDS - t0)) s"
timeout $((560 - SECONDS + t0)) python3 -P benchmarks/bench_cold_start.py --arch qwen2.5-0.5b --tokenizer .gpu/tok \
  --texts 1000 10000 --runs 1 --json "$OUT/call1-cold-qwen.json" > "$OUT/call1-cold-qwen.md" 2>&1
tail -12 "$OUT/call1-cold-qwen.md"
echo "cold: $((SECONDS - t0)) s"
