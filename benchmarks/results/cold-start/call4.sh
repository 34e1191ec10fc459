#!/usr/bin/env bash
# Issue 57, call 4 (the new policy; what little device time was left after call 3 could not start): the CUDA tests of
# the graphs, then the cold-start benchmark at the Qwen2.5-0.5B shape, nosink's default beside sentence-transformers.
set -uo pipefail
source benchmarks/results/device-setup.sh
t0=$SECONDS
left() { echo $((${BUDGET:-220} - SECONDS + t0)); }
timeout 95 python3 -P -m pytest -q -p no:cacheprovider -x tests/test_graphs.py 2>&1 | tail -8 | tee "$OUT/call4-tests.txt"
echo "tests: $((SECONDS - t0)) s"
timeout $(left) python3 -P benchmarks/bench_cold_start.py --arch qwen2.5-0.5b --tokenizer .gpu/tok \
  --texts 10000 1000 --runs 1 --tools nosink st --json "$OUT/call4-cold-qwen.json" > "$OUT/call4-cold-qwen.md" 2>&1
tail -9 "$OUT/call4-cold-qwen.md"
echo "cold qwen: $((SECONDS - t0)) s"
