#!/usr/bin/env bash
# call5.sh again with the bench turning the rows' order by one each round (8 rounds of 4 rows: each row twice in
# every place). From the checkout root (wheels in .whl/, tokenizer in .gpu/tok).
set -uo pipefail
source benchmarks/results/device-setup.sh
cd /tmp
timeout 150 python3 "$SRC/benchmarks/bench_texts_gpu.py" --arch qwen2.5-0.5b --tokenizer "$SRC/.gpu/tok" \
  --texts 8192 --repeats 8 --no-eager --no-st --specs "F*" "F* | M0B*12" "F* | B*12" --json "$OUT/call6-turned.json" \
  2>&1 | grep -v "Warning\|shards\|Loading" | tee "$OUT/call6-turned.md"
