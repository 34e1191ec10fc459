#!/usr/bin/env bash
# Issue 29: the embeddings route past FastAPI's routing (this commit) with 8, 12 and 16 front-ends, on one machine;
# call2.sh then runs the code before it (.gpu/old) on the same machine, warm.
set -uo pipefail
source benchmarks/results/device-setup.sh
t0=$SECONDS
cd /tmp
timeout 590 python3 "$SRC/benchmarks/bench_serve_gpu.py" --arch qwen2.5-0.5b --spec "F* | M0B*12" \
  --tokenizer "$SRC/.gpu/tok" --workers 8 12 16 --seconds 8 --loads 64x1 "64x1 + 8 chats" \
  --compare-loads 64x1 "64x1 + 8 chats" --json "$OUT/call1-new-qwen2.5-0.5b.json" 2>&1 \
  | grep -v "Loading weights\|Writing model\|^  workers=" | tee "$OUT/call1-new-qwen2.5-0.5b.md"
echo "new: $((SECONDS - t0)) s"
