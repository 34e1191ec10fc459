#!/usr/bin/env bash
# Issue 57, call 3 (the new policy): the CUDA tests of the graphs, the capture probe again, and the steady state
# (bench_texts_gpu.py, F* and MASK0-BIDIR) of the new default and after warm_up(), beside the code before the change
# (c757048, unpacked in .gpu/old) on the Qwen2.5-0.5B shape.
set -uo pipefail
source benchmarks/results/device-setup.sh
old_package
t0=$SECONDS
timeout 150 python3 -P -m pytest -q -p no:cacheprovider tests/test_graphs.py 2>&1 | tail -8 | tee "$OUT/call3-tests.txt"
echo "tests: $((SECONDS - t0)) s"
timeout 100 python3 -P benchmarks/results/cold-start/probe.py --arch qwen2.5-0.5b --tokenizer .gpu/tok \
  > "$OUT/call3-probe-qwen.txt" 2>&1
grep "call\|warm_up\|memory" "$OUT/call3-probe-qwen.txt" | head -30
echo "probe: $((SECONDS - t0)) s"
B="python3 -P benchmarks/bench_texts_gpu.py --tokenizer .gpu/tok --repeats 3 --no-st --no-eager"
timeout 130 $B --arch qwen2.5-0.5b --specs "F*" "F* | M0B*12" --warm-up --json "$OUT/call3-steady-qwen.json" 2>&1 \
  | grep -v Warn | tail -8
echo "new qwen: $((SECONDS - t0)) s"
PYTHONPATH=/tmp/pkgold:/tmp/site timeout 100 $B --arch qwen2.5-0.5b --specs "F*" "F* | M0B*12" 2>&1 | grep -v Warn \
  | tail -6
echo "old qwen: $((SECONDS - t0)) s"
timeout $((590 - SECONDS + t0)) $B --arch llama-1b --specs "F*" "F* | M0B*8" --warm-up \
  --json "$OUT/call3-steady-llama.json" 2>&1 | grep -v Warn | tail -8
echo "new llama: $((SECONDS - t0)) s"
