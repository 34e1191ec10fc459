#!/usr/bin/env bash
# Issue 29: the mixed load and 16 chats, e764879's code against this commit's, on one machine (call 3's mixed-load
# chats were slower than last session's: a regression or the machine?).
set -uo pipefail
source benchmarks/results/device-setup.sh
rm -rf /tmp/pkgold && mkdir -p /tmp/pkgold && cp -r .gpu/old/nosink /tmp/pkgold/nosink
for d in layerspec models corpus evals; do cp -r .gpu/old/$d /tmp/pkgold/nosink/$d; done
t0=$SECONDS
cd /tmp
for code in new old; do
  path=/tmp/pkg:/tmp/site; code_limit=260; [ $code = old ] && path=/tmp/pkgold:/tmp/site && code_limit=520
  PYTHONPATH=$path timeout $((code_limit - SECONDS + t0)) python3 "$SRC/benchmarks/bench_serve_gpu.py" \
    --arch qwen2.5-0.5b --spec "F* | M0B*12" --tokenizer "$SRC/.gpu/tok" --workers 4 --seconds 8 \
    --loads "64x1 + 8 chats" "16 chats" --json "$OUT/call4-$code-qwen2.5-0.5b.json" 2>&1 \
    | grep -v "Loading weights\|Writing model\|^  workers=" | tee "$OUT/call4-$code-qwen2.5-0.5b.md"
  echo "$code: $((SECONDS - t0)) s"
done
