#!/usr/bin/env bash
# Issue 29: call 2 again in the other order, and the older code twice around the newer: 36f5963 (.gpu/mid, no
# freezing), this working tree (the start-up heap frozen while serving), 36f5963 again; Qwen2.5-0.5B shape, three
# loads. From the checkout root, wheels in .whl/.
set -uo pipefail
source benchmarks/results/device-setup.sh
old_package .gpu/mid
t0=$SECONDS
cd /tmp
for run in mid1 new mid2; do
  path=/tmp/pkgmid:/tmp/site; [ $run = new ] && path=/tmp/pkg:/tmp/site
  PYTHONPATH=$path timeout $((585 - SECONDS + t0)) python3 "$SRC/benchmarks/bench_serve_gpu.py" \
    --arch qwen2.5-0.5b --spec "F* | M0B*12" --tokenizer "$SRC/.gpu/tok" --workers 8 --seconds 8 \
    --loads 64x1 16x16 "64x1 + 8 chats" --json "$OUT/call4-$run-qwen2.5-0.5b.json" 2>&1 \
    | grep -v "Loading weights\|Writing model\|^  workers=" | tee "$OUT/call4-$run-qwen2.5-0.5b.md"
  echo "$run: $((SECONDS - t0)) s"
done
