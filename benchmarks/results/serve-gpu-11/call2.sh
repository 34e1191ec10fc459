#!/usr/bin/env bash
# Issue 28/29: encode()'s batches through CUDA graphs that also pool (models/replaying.py, _replay_pooled): the CUDA
# tests of the graphs first, then launch-probe.py (the host's launch of one batch, by rows), then the server's
# 64 x 1 and 16 x 16 loads, Qwen2.5-0.5B shape. From the checkout root, with the wheels in .whl/ and a Qwen2.5
# tokenizer in .gpu/tok.
set -uo pipefail
source benchmarks/results/device-setup.sh
t0=$SECONDS
timeout 170 python3 -P -m pytest -q -p no:cacheprovider -x tests/test_graphs.py tests/test_prepend.py \
  tests/test_serve_batches.py 2>&1 | tail -15 | tee "$OUT/call2-tests.txt"
echo "tests: $((SECONDS - t0)) s"
cd /tmp
timeout 90 python3 "$SRC/benchmarks/results/serve-gpu-11/launch-probe.py" "$SRC/.gpu/tok" 2>&1 \
  | grep -v "Loading weights\|Writing model\|LOAD REPORT\|^Key\|^---\|lm_head\|^Notes\|UNEXPECTED\|^$" \
  | head -12 | tee "$OUT/call2-launch-probe.txt"
echo "probe: $((SECONDS - t0)) s"
timeout $((470 - SECONDS + t0)) python3 "$SRC/benchmarks/bench_serve_gpu.py" --arch qwen2.5-0.5b --spec "F* | M0B*12" \
  --tokenizer "$SRC/.gpu/tok" --workers 8 --seconds 8 --loads 64x1 16x16 --json "$OUT/call2-qwen2.5-0.5b.json" 2>&1 \
  | grep -v "Loading weights\|Writing model\|^  workers=" | tee "$OUT/call2-qwen2.5-0.5b.md"
echo "bench: $((SECONDS - t0)) s"
