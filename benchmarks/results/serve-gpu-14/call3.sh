#!/usr/bin/env bash
# Issue 29: call 2 ran out of its time limits before its riding servers; here only the riding server's mixed load
# (--loads with nothing after it), each shape, 5 s unmeasured first and py-spy on the model's process.
set -uo pipefail
source benchmarks/results/device-setup.sh
t0=$SECONDS
cd /tmp
for arch in "qwen2.5-0.5b;F* | M0B*12;200" "llama-1b;F* | M0B*8;400"; do
  IFS=";" read -r name spec limit <<< "$arch"
  timeout $((limit - SECONDS + t0)) python3 "$SRC/benchmarks/bench_serve_gpu.py" --arch "$name" --spec "$spec" \
    --tokenizer "$SRC/.gpu/tok" --workers 8 --seconds 8 --warm-each 5 --loads --riding-loads "64x1 + 8 chats" \
    --py-spy /tmp/site/bin/py-spy --profile-dir "$OUT" \
    --json "$OUT/call3-$name.json" > "$OUT/call3-$name.log" 2>&1
  grep -A3 "^| load\|^offline\|Traceback\|Error" "$OUT/call3-$name.log" | head -30
  mv "$OUT/py-spy-8-chat-riding-64x1-and-8chats.txt" "$OUT/py-spy-$name-riding.txt" 2>/dev/null
  echo "$name: $((SECONDS - t0)) s"
done
