#!/usr/bin/env bash
# Issue 57, call 3 (the new policy), in the order of what matters most, each step within what is left of 590 s: the
# CUDA tests of the graphs; the cold-start benchmark at the Qwen2.5-0.5B shape; the steady state (bench_texts_gpu.py,
# F* and MASK0-BIDIR) of the new default and after warm_up(), then the code before the change (c757048, unpacked in
# .gpu/old); then the Llama-3.2-1B shape's cold start.
set -uo pipefail
source benchmarks/results/device-setup.sh
old_package
t0=$SECONDS
left() { echo $((${BUDGET:-480} - SECONDS + t0)); }
timeout 120 python3 -P -m pytest -q -p no:cacheprovider -x tests/test_graphs.py 2>&1 | tail -8 | tee "$OUT/call3-tests.txt"
echo "tests: $((SECONDS - t0)) s"
timeout $(left) python3 -P benchmarks/bench_cold_start.py --arch qwen2.5-0.5b --tokenizer .gpu/tok \
  --texts 1000 10000 --runs 1 --json "$OUT/call3-cold-qwen.json" > "$OUT/call3-cold-qwen.md" 2>&1
tail -9 "$OUT/call3-cold-qwen.md"
echo "cold qwen: $((SECONDS - t0)) s"
B="python3 -P benchmarks/bench_texts_gpu.py --tokenizer .gpu/tok --repeats 3 --no-st --no-eager"
timeout $(left) $B --arch qwen2.5-0.5b --specs "F*" "F* | M0B*12" --warm-up --json "$OUT/call3-steady-qwen.json" \
  2>&1 | grep -v Warn | tail -8
echo "new qwen: $((SECONDS - t0)) s"
PYTHONPATH=/tmp/pkgold:/tmp/site timeout $(left) $B --arch qwen2.5-0.5b --specs "F*" "F* | M0B*12" 2>&1 \
  | grep -v Warn | tail -6
echo "old qwen: $((SECONDS - t0)) s"
timeout $(left) python3 -P benchmarks/bench_cold_start.py --arch llama-1b --tokenizer .gpu/tok \
  --texts 1000 10000 --runs 1 --json "$OUT/call3-cold-llama.json" > "$OUT/call3-cold-llama.md" 2>&1
tail -9 "$OUT/call3-cold-llama.md"
echo "cold llama: $((SECONDS - t0)) s"
