#!/usr/bin/env bash
# Issue 29: this session's serving work (this working tree: bulk pipe reads, Reply, flat jobs, stacked vectors, the
# frozen start-up heap) against d9f6f62 (.gpu/old), one machine, Llama-3.2-1B shape. From the checkout root.
set -uo pipefail
source benchmarks/results/device-setup.sh
old_package
t0=$SECONDS
cd /tmp
for code in new old; do
  path=/tmp/pkg:/tmp/site; code_limit=290; [ $code = old ] && path=/tmp/pkgold:/tmp/site && code_limit=580
  PYTHONPATH=$path timeout $((code_limit - SECONDS + t0)) python3 "$SRC/benchmarks/bench_serve_gpu.py" \
    --arch llama-1b --spec "F* | M0B*8" --tokenizer "$SRC/.gpu/tok" --workers 8 --seconds 8 \
    --loads 64x1 16x16 "64x1 + 8 chats" "1 chat" --json "$OUT/call3-$code-llama-1b.json" 2>&1 \
    | grep -v "Loading weights\|Writing model\|^  workers=" | tee "$OUT/call3-$code-llama-1b.md"
  echo "$code: $((SECONDS - t0)) s"
done
