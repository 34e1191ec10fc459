#!/usr/bin/env bash
# Issue 29: embedding batches in flight (this commit: a batch is answered after the next one is launched) against
# 96a0fad (.gpu/old: each batch answered before the next is built), 8 front-ends, on one machine, after the CUDA
# tests of the serving engine.
set -uo pipefail
source benchmarks/results/device-setup.sh
old_package
t0=$SECONDS
timeout 150 python3 -P -m pytest -q -p no:cacheprovider tests/test_serve_batches.py 2>&1 | tail -5 | tee "$OUT/call1-tests.txt"
echo "tests: $((SECONDS - t0)) s"
cd /tmp
for code in new old; do
  path=/tmp/pkg:/tmp/site; code_limit=375; [ $code = old ] && path=/tmp/pkgold:/tmp/site && code_limit=590
  PYTHONPATH=$path timeout $((code_limit - SECONDS + t0)) python3 "$SRC/benchmarks/bench_serve_gpu.py" \
    --arch qwen2.5-0.5b --spec "F* | M0B*12" --tokenizer "$SRC/.gpu/tok" --workers 8 --seconds 8 \
    --loads 64x1 256x1 "64x1 + 8 chats" --json "$OUT/call1-$code-qwen2.5-0.5b.json" 2>&1 \
    | grep -v "Loading weights\|Writing model\|^  workers=" | tee "$OUT/call1-$code-qwen2.5-0.5b.md"
  echo "$code: $((SECONDS - t0)) s"
done
