#!/usr/bin/env bash
# call1.sh again, in another order: call 1's test selection ran past its 240 s (no result) and the probe lacked a
# chat template. The rider's CUDA tests and the chat steps' first, then the probe, then the graphs' tests.
set -uo pipefail
source benchmarks/results/device-setup.sh
t0=$SECONDS
timeout 120 python3 -P -m pytest -q -p no:cacheprovider tests/test_riding.py "tests/test_serve_chat.py" \
  -k "gpu or riding or rider" 2>&1 | tail -8 | tee "$OUT/call2-tests.txt"
echo "tests: $((SECONDS - t0)) s"
cd /tmp
for arch in "qwen2.5-0.5b|F* | M0B*12" "llama-1b|F* | M0B*8"; do
  timeout 120 python3 "$SRC/benchmarks/results/serve-gpu-13/ride-probe.py" --tokenizer "$SRC/.gpu/tok" \
    --arch "${arch%%|*}" --spec "${arch#*|}" 2>&1 | grep -v "Loading weights\|Writing model" \
    | tee -a "$OUT/call2-probe.md"
  echo "probe ${arch%%|*}: $((SECONDS - t0)) s"
done
cd "$SRC"
timeout $((560 - SECONDS + t0)) python3 -P -m pytest -q -p no:cacheprovider tests/test_graphs.py \
  tests/test_serve_batches.py 2>&1 | tail -8 | tee "$OUT/call2-graph-tests.txt"
echo "all: $((SECONDS - t0)) s"
