#!/usr/bin/env bash
# Device call 2: the graph tests again, the mixed load's collapse looked for (before and after 256x1), the
# Llama-3.2-1B shape's table.
set -uo pipefail
source benchmarks/results/device-setup.sh
t0=$SECONDS
timeout 100 python3 -P -m pytest -q -p no:cacheprovider tests/test_graphs.py 2>&1 | tail -3 | tee "$OUT/tests.txt"
echo "tests: $((SECONDS - t0)) s"
cd /tmp
python3 "$SRC/benchmarks/bench_serve_gpu.py" --arch qwen2.5-0.5b --spec "F* | M0B*12" --tokenizer "$SRC/.gpu/tok" \
    --workers 4 --seconds 8 --loads "64x1 + 8 chats" 64x1 256x1 "64x1 + 8 chat" "1 chat" 16x16 \
    --json "$OUT/mixed-qwen2.5-0.5b.json" 2>&1 | grep -v "Loading weights\|Writing model" | tee "$OUT/mixed-qwen2.5-0.5b.md"
echo "mixed: $((SECONDS - t0)) s"
timeout $((585 - SECONDS)) python3 "$SRC/benchmarks/bench_serve_gpu.py" --arch llama-1b --spec "F* | M0B*8" \
    --tokenizer "$SRC/.gpu/tok" --workers 4 --seconds 8 --json "$OUT/llama-1b.json" 2>&1 \
    | grep -v "Loading weights\|Writing model" | tee "$OUT/llama-1b.md"
echo "llama: $((SECONDS - t0)) s"
