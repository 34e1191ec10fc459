#!/usr/bin/env bash
# Issue 29: the model's process's work per request cut (bulk pipe reads, a lock-free Reply, flat job tuples, one
# array of vectors per front-end and unit) in this working tree, against d9f6f62 (.gpu/old), on one machine,
# Qwen2.5-0.5B shape: the serve tests on CUDA first, then the loads with py-spy sampling the model's process
# (where its CPU goes). From the checkout root, with the wheels (py-spy's among them) in .whl/.
set -uo pipefail
source benchmarks/results/device-setup.sh
old_package
t0=$SECONDS
timeout 120 python3 -P -m pytest -q -p no:cacheprovider tests/test_serve_jobs.py tests/test_serve_processes.py \
  tests/test_serve_batches.py 2>&1 | tail -3 | tee "$OUT/call1-tests.txt"
echo "tests: $((SECONDS - t0)) s"
cd /tmp
for code in new old; do
  path=/tmp/pkg:/tmp/site; code_limit=330; [ $code = old ] && path=/tmp/pkgold:/tmp/site && code_limit=570
  mkdir -p "$OUT/spy-$code"
  PYTHONPATH=$path timeout $((code_limit - SECONDS + t0)) python3 "$SRC/benchmarks/bench_serve_gpu.py" \
    --arch qwen2.5-0.5b --spec "F* | M0B*12" --tokenizer "$SRC/.gpu/tok" --workers 8 --seconds 8 \
    --loads 64x1 16x16 "64x1 + 8 chats" "1 chat" --py-spy /tmp/site/bin/py-spy --profile-dir "$OUT/spy-$code" \
    --json "$OUT/call1-$code-qwen2.5-0.5b.json" 2>&1 \
    | grep -v "Loading weights\|Writing model\|^  workers=" | tee "$OUT/call1-$code-qwen2.5-0.5b.md"
  echo "$code: $((SECONDS - t0)) s"
done
