#!/usr/bin/env bash
# Issue 29, tracing riding's served slowness (serve-gpu-13: 41 ms a riding batch served against 8.4 ms in the probe).
# First the CUDA tests not re-run since serve-gpu-13's fixes (the rider in the pooled graph; batches in flight); then
# the mixed load on the Qwen2.5-0.5B shape, each load run unmeasured for 5 s first (--warm-each), with torch's
# recompilations logged and py-spy sampling the model's process: on a server taking turns and on one riding.
set -uo pipefail
source benchmarks/results/device-setup.sh
t0=$SECONDS
timeout 150 python3 -P -m pytest -q -p no:cacheprovider tests/test_riding.py tests/test_graphs.py \
  tests/test_serve_batches.py -k "gpu or cuda" --tb=short > "$OUT/call1-tests.txt" 2>&1
tail -5 "$OUT/call1-tests.txt"
echo "tests: $((SECONDS - t0)) s"
cd /tmp
export TORCH_LOGS=recompiles
timeout $((560 - SECONDS + t0)) python3 "$SRC/benchmarks/bench_serve_gpu.py" --arch qwen2.5-0.5b \
  --spec "F* | M0B*12" --tokenizer "$SRC/.gpu/tok" --workers 8 --seconds 8 --warm-each 5 \
  --loads "64x1 + 8 chats" "1 chat" --riding-loads "64x1 + 8 chats" \
  --py-spy /tmp/site/bin/py-spy --profile-dir "$OUT" \
  --json "$OUT/call1-qwen2.5-0.5b.json" > "$OUT/call1-qwen2.5-0.5b.log" 2>&1
grep -v "Loading weights\|Writing model\|^  workers=" "$OUT/call1-qwen2.5-0.5b.log" | tail -80
echo "qwen: $((SECONDS - t0)) s"
