#!/usr/bin/env bash
# Issue 29: the start-up heap frozen while serving (this working tree) against 36f5963 (.gpu/mid: this session's
# pipe work, no freezing), one machine, Qwen2.5-0.5B shape, no py-spy. From the checkout root, wheels in .whl/.
set -uo pipefail
source benchmarks/results/device-setup.sh
old_package .gpu/mid
t0=$SECONDS
cd /tmp
for code in new mid; do
  path=/tmp/pkg:/tmp/site; code_limit=290; [ $code = mid ] && path=/tmp/pkgmid:/tmp/site && code_limit=580
  PYTHONPATH=$path timeout $((code_limit - SECONDS + t0)) python3 "$SRC/benchmarks/bench_serve_gpu.py" \
    --arch qwen2.5-0.5b --spec "F* | M0B*12" --tokenizer "$SRC/.gpu/tok" --workers 8 --seconds 8 \
    --loads 64x1 16x16 "64x1 + 8 chats" "1 chat" --json "$OUT/call2-$code-qwen2.5-0.5b.json" 2>&1 \
    | grep -v "Loading weights\|Writing model\|^  workers=" | tee "$OUT/call2-$code-qwen2.5-0.5b.md"
  echo "$code: $((SECONDS - t0)) s"
done
