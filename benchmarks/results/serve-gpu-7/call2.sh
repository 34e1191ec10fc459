#!/usr/bin/env bash
# Issue 29: after call 1, with the chat prefill fix: the CUDA tests of the engine's batches and of the chat rows,
# then this commit against 96a0fad (.gpu/old) again, on one machine: 64 x 1, 16 x 16 and the mixed load.
set -uo pipefail
source benchmarks/results/device-setup.sh
old_package
t0=$SECONDS
timeout 120 python3 -P -m pytest -q -p no:cacheprovider tests/test_serve_batches.py tests/test_serve_chat.py \
  -k "cuda or gpu or more_prompts or in_flight" 2>&1 | tail -3 | tee "$OUT/call2-tests.txt"
echo "tests: $((SECONDS - t0)) s"
cd /tmp
for code in new old; do
  path=/tmp/pkg:/tmp/site; code_limit=360; [ $code = old ] && path=/tmp/pkgold:/tmp/site && code_limit=590
  PYTHONPATH=$path timeout $((code_limit - SECONDS + t0)) python3 "$SRC/benchmarks/bench_serve_gpu.py" \
    --arch qwen2.5-0.5b --spec "F* | M0B*12" --tokenizer "$SRC/.gpu/tok" --workers 8 --seconds 8 \
    --loads 64x1 16x16 "64x1 + 8 chats" --json "$OUT/call2-$code-qwen2.5-0.5b.json" 2>&1 \
    | grep -v "Loading weights\|Writing model\|^  workers=" | tee "$OUT/call2-$code-qwen2.5-0.5b.md"
  echo "$code: $((SECONDS - t0)) s"
done
