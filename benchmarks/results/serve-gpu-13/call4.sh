#!/usr/bin/env bash
# Call 3's riding mixed load was 0.2-0.3x of taking turns (41 ms a batch against 8): the same load again with py-spy on
# the model's process (where its time goes) and torch's recompilations counted in the server's log.
set -uo pipefail
source benchmarks/results/device-setup.sh
t0=$SECONDS
cd /tmp
export TORCH_LOGS=recompiles
timeout 200 python3 "$SRC/benchmarks/bench_serve_gpu.py" --arch qwen2.5-0.5b --texts 4096 \
  --spec "F* | M0B*12" --tokenizer "$SRC/.gpu/tok" --workers 8 --seconds 8 --loads "64x1 + 8 chats" \
  --py-spy /tmp/site/bin/py-spy --profile-dir "$OUT" \
  --json "$OUT/call4-qwen2.5-0.5b.json" 2>&1 | grep -v "Loading weights\|Writing model\|^  workers=" \
  | tee "$OUT/call4-qwen2.5-0.5b.md"
echo "qwen: $((SECONDS - t0)) s"
