#!/usr/bin/env bash
# Issue 29: the code before this commit's route change (.gpu/old: git archive of its parent), 8 and 12 front-ends,
# on call1.sh's machine (a warm call).
set -uo pipefail
source benchmarks/results/device-setup.sh
old_package
t0=$SECONDS
cd /tmp
PYTHONPATH=/tmp/pkgold:/tmp/site timeout 590 python3 "$SRC/benchmarks/bench_serve_gpu.py" --arch qwen2.5-0.5b \
  --spec "F* | M0B*12" --tokenizer "$SRC/.gpu/tok" --workers 8 12 --seconds 8 --loads 64x1 "64x1 + 8 chats" \
  --compare-loads 64x1 "64x1 + 8 chats" --json "$OUT/call2-old-qwen2.5-0.5b.json" 2>&1 \
  | grep -v "Loading weights\|Writing model\|^  workers=" | tee "$OUT/call2-old-qwen2.5-0.5b.md"
echo "old: $((SECONDS - t0)) s"
