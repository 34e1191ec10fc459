#!/usr/bin/env bash
# Issue 28 on a lent H200: the CUDA tests of the graphs and the fast path's CUDA check with M0B as one call, then
# probe.py (one call against two, both shapes). From the checkout root, wheels in .whl/, tokenizer in .gpu/tok.
set -uo pipefail
source benchmarks/results/device-setup.sh
t0=$SECONDS
python3 -P -m pytest -q -p no:cacheprovider tests/test_graphs.py 2>&1 | tail -4 | tee "$OUT/test-graphs.txt"
python3 -P benchmarks/check_fast_path.py --device cuda > "$OUT/check.txt" 2>&1; tail -5 "$OUT/check.txt"
echo "checks: $((SECONDS - t0)) s"
timeout $((590 - SECONDS + t0)) python3 -P benchmarks/results/m0b-one-call/probe.py --tokenizer .gpu/tok 2>&1 \
    | grep -v "Warning\|warn(" | tee "$OUT/probe.md"
echo "all: $((SECONDS - t0)) s"
