#!/usr/bin/env bash
# Issue 29: riding with the chats' tokens taken after the next batch is launched (the GPU is never left idle while
# the host samples), against taking turns, on both shapes; each load run unmeasured for 5 s first (--warm-each), and
# py-spy sampling the model's process.
set -uo pipefail
source benchmarks/results/device-setup.sh
t0=$SECONDS
cd /tmp
for arch in "qwen2.5-0.5b;F* | M0B*12;270" "llama-1b;F* | M0B*8;290"; do
  IFS=";" read -r name spec limit <<< "$arch"
  timeout "$limit" python3 "$SRC/benchmarks/bench_serve_gpu.py" --arch "$name" --spec "$spec" \
    --tokenizer "$SRC/.gpu/tok" --workers 8 --seconds 8 --warm-each 5 \
    --loads "64x1 + 8 chats" "1 chat" --riding-loads "64x1 + 8 chats" \
    --py-spy /tmp/site/bin/py-spy --profile-dir "$OUT" \
    --json "$OUT/call2-$name.json" > "$OUT/call2-$name.log" 2>&1
  grep -v "Loading weights\|Writing model\|^  workers=\|^V1202\|recompiles\]" "$OUT/call2-$name.log" \
    | grep -A3 "^| load\|^offline\|riding\|Traceback\|Error" | head -40
  echo "$name: $((SECONDS - t0)) s"
done
