#!/usr/bin/env bash
# Is F*'s slower row on the 0.5B shape (call 2) its own or its place right after the stock rows? The same bench with
# F* second among three specs, no sentence-transformers. From the checkout root (wheels in .whl/, tokenizer in .gpu/tok).
set -uo pipefail
source benchmarks/results/device-setup.sh
cd /tmp
timeout 230 python3 "$SRC/benchmarks/bench_texts_gpu.py" --arch qwen2.5-0.5b --tokenizer "$SRC/.gpu/tok" \
  --texts 8192 --repeats 5 --no-eager --no-st --specs "F* | M0B*12" "F*" "F* | B*12" 2>&1 | grep -v "Warning\|shards\|Loading" \
  | tee "$OUT/call5-order.md"
