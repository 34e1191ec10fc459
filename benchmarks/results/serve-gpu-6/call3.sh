#!/usr/bin/env bash
# Issue 29: this commit (the direct embeddings route, and one message per front-end per unit of the engine's work)
# against cbccbd1 (.gpu/old: neither), 8 front-ends, 64 x 1 and the mixed load, on one machine.
set -uo pipefail
source benchmarks/results/device-setup.sh
old_package
t0=$SECONDS
cd /tmp
for code in new old; do
  path=/tmp/pkg:/tmp/site; code_limit=290; [ $code = old ] && path=/tmp/pkgold:/tmp/site && code_limit=585
  PYTHONPATH=$path timeout $((code_limit - SECONDS + t0)) python3 "$SRC/benchmarks/bench_serve_gpu.py" \
    --arch qwen2.5-0.5b --spec "F* | M0B*12" --tokenizer "$SRC/.gpu/tok" --workers 8 --seconds 8 \
    --loads 64x1 "64x1 + 8 chats" --json "$OUT/call3-$code-qwen2.5-0.5b.json" 2>&1 \
    | grep -v "Loading weights\|Writing model\|^  workers=" | tee "$OUT/call3-$code-qwen2.5-0.5b.md"
  echo "$code: $((SECONDS - t0)) s"
done
