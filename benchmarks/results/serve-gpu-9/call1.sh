#!/usr/bin/env bash
# Issue 29: chat steps on a CUDA stream of their own, beside the embedding batch in flight (this working tree)
# against c83d6e2 (.gpu/old: a batch in flight answered before each chat step), one machine, Qwen2.5-0.5B shape:
# the CUDA tests of the engine first, then 64 x 1, the mixed load and one chat alone. From the checkout root.
set -uo pipefail
source benchmarks/results/device-setup.sh
old_package
t0=$SECONDS
timeout 150 python3 -P -m pytest -q -p no:cacheprovider tests/test_serve_chat.py tests/test_serve_batches.py \
  -k "gpu or cuda or beside or more_prompts or shares" 2>&1 | tail -3 | tee "$OUT/call1-tests.txt"
echo "tests: $((SECONDS - t0)) s"
cd /tmp
for code in new old; do
  path=/tmp/pkg:/tmp/site; code_limit=370; [ $code = old ] && path=/tmp/pkgold:/tmp/site && code_limit=590
  PYTHONPATH=$path timeout $((code_limit - SECONDS + t0)) python3 "$SRC/benchmarks/bench_serve_gpu.py" \
    --arch qwen2.5-0.5b --spec "F* | M0B*12" --tokenizer "$SRC/.gpu/tok" --workers 8 --seconds 8 \
    --loads "64x1 + 8 chats" "1 chat" 64x1 --json "$OUT/call1-$code-qwen2.5-0.5b.json" 2>&1 \
    | grep -v "Loading weights\|Writing model\|^  workers=" | tee "$OUT/call1-$code-qwen2.5-0.5b.md"
  echo "$code: $((SECONDS - t0)) s"
done
