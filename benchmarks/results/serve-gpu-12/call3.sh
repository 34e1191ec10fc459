#!/usr/bin/env bash
# Issue 29's closing run at this commit (the pooled graphs, the fixed offline baseline): the mixed and chat loads on
# the Qwen2.5-0.5B shape, and every load on the Llama-3.2-1B shape, 8 front-ends, 8 s a load. From the checkout
# root, with the wheels in .whl/ and a Qwen2.5 tokenizer in .gpu/tok.
set -uo pipefail
source benchmarks/results/device-setup.sh
t0=$SECONDS
cd /tmp
timeout 250 python3 "$SRC/benchmarks/bench_serve_gpu.py" --arch qwen2.5-0.5b --spec "F* | M0B*12" \
  --tokenizer "$SRC/.gpu/tok" --workers 8 --seconds 8 --loads 64x1 "64x1 + 8 chats" "1 chat" "16 chats" \
  --json "$OUT/call3-qwen2.5-0.5b.json" 2>&1 | grep -v "Loading weights\|Writing model\|^  workers=" \
  | tee "$OUT/call3-qwen2.5-0.5b.md"
echo "qwen: $((SECONDS - t0)) s"
timeout $((540 - SECONDS + t0)) python3 "$SRC/benchmarks/bench_serve_gpu.py" --arch llama-1b --spec "F* | M0B*8" \
  --tokenizer "$SRC/.gpu/tok" --workers 8 --seconds 8 --loads 64x1 16x16 "64x1 + 8 chats" "1 chat" \
  --json "$OUT/call3-llama-1b.json" 2>&1 | grep -v "Loading weights\|Writing model\|^  workers=" \
  | tee "$OUT/call3-llama-1b.md"
echo "llama: $((SECONDS - t0)) s"
