#!/usr/bin/env bash
# Issue 29: a batch in flight (this commit) against 96a0fad (.gpu/old: every batch answered before the next is
# built) on the Llama-3.2-1B shape, one machine: 64 x 1, 16 x 16 and the mixed load. From the checkout root.
set -uo pipefail
source benchmarks/results/device-setup.sh
old_package
t0=$SECONDS
cd /tmp
for code in new old; do
  path=/tmp/pkg:/tmp/site; code_limit=330; [ $code = old ] && path=/tmp/pkgold:/tmp/site && code_limit=590
  PYTHONPATH=$path timeout $((code_limit - SECONDS + t0)) python3 "$SRC/benchmarks/bench_serve_gpu.py" \
    --arch llama-1b --spec "F* | M0B*8" --tokenizer "$SRC/.gpu/tok" --workers 8 --seconds 8 \
    --loads 64x1 16x16 "64x1 + 8 chats" --json "$OUT/call1-$code-llama-1b.json" 2>&1 \
    | grep -v "Loading weights\|Writing model\|^  workers=" | tee "$OUT/call1-$code-llama-1b.md"
  echo "$code: $((SECONDS - t0)) s"
done
