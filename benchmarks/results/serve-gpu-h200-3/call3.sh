#!/usr/bin/env bash
# Issue 29, this session: the chat decode step as a CUDA graph (kv.Rows) on a GPU: its tests, the step probe,
# then the serving table of the Qwen2.5-0.5B shape (and the Llama-3.2-1B shape while time is left).
set -uo pipefail
source benchmarks/results/device-setup.sh
t0=$SECONDS
(cd tests && timeout 120 python3 -P -m pytest -q -p no:cacheprovider --import-mode=importlib test_serve_chat.py 2>&1 | tail -4) | tee "$OUT/tests.txt"
echo "tests: $((SECONDS - t0)) s"
cd /tmp
timeout 120 python3 -P "$SRC/benchmarks/results/chat-step-probe.py" --arch qwen2.5-0.5b --tokenizer "$SRC/.gpu/tok" 2>&1 \
  | grep -v "Loading weights\|Writing model" | tee "$OUT/chat-step-qwen2.5-0.5b.md"
echo "probe: $((SECONDS - t0)) s"
timeout $((400 - SECONDS)) python3 "$SRC/benchmarks/bench_serve_gpu.py" --arch qwen2.5-0.5b --spec "F* | M0B*12" \
  --tokenizer "$SRC/.gpu/tok" --workers 4 --seconds 8 --loads "1 chat" "16 chats" "64x1 + 8 chats" 64x1 16x16 \
  --json "$OUT/qwen2.5-0.5b.json" 2>&1 | grep -v "Loading weights\|Writing model" | tee "$OUT/qwen2.5-0.5b.md"
echo "qwen: $((SECONDS - t0)) s"
timeout $((540 - SECONDS)) python3 "$SRC/benchmarks/bench_serve_gpu.py" --arch llama-1b --spec "F* | M0B*8" \
  --tokenizer "$SRC/.gpu/tok" --workers 4 --seconds 8 --loads "1 chat" "16 chats" "64x1 + 8 chats" \
  --json "$OUT/llama-1b.json" 2>&1 | grep -v "Loading weights\|Writing model" | tee "$OUT/llama-1b.md"
echo "llama: $((SECONDS - t0)) s"
