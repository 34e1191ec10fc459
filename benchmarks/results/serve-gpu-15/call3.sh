#!/usr/bin/env bash
# Issue 29: call 2's chat-stream server alone (call 2 ran out of its limit while that server was loaded): the mixed
# load on a server with --chat-stream, its load run unmeasured for 5 s first.
set -uo pipefail
source benchmarks/results/device-setup.sh
name=$1 spec=$2 limit=$3
cd /tmp
timeout "$limit" python3 "$SRC/benchmarks/bench_serve_gpu.py" --arch "$name" --spec "$spec" \
  --tokenizer "$SRC/.gpu/tok" --workers 8 --seconds 8 --warm-each 5 \
  --loads --variant chat-stream "64x1 + 8 chats" \
  --json "$OUT/call3-$name.json" > "$OUT/call3-$name.log" 2>&1
grep -v "Loading weights\|Writing model\|^V1202\|^W1202\|recompiles\]" "$OUT/call3-$name.log" | tail -30
