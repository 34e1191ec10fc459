#!/usr/bin/env bash
# Issue 28's closing run: bench_texts_gpu.py on both shapes (graph rows only: the eager rows are in
# ../texts-gpu-h200/), then the forward against stock on padded and long batches. From the checkout root, with the
# wheels in .whl/ and a Qwen2.5 tokenizer in .gpu/tok.
set -uo pipefail
source benchmarks/results/device-setup.sh
t0=$SECONDS
cd /tmp
for arch in qwen2.5-0.5b llama-1b; do
  timeout 240 python3 "$SRC/benchmarks/bench_texts_gpu.py" --arch $arch --tokenizer "$SRC/.gpu/tok" --texts 8192 \
    --repeats 5 --no-eager --json "$OUT/texts-$arch.json" 2>&1 | grep -v Warning | tee "$OUT/texts-$arch.md"
  echo "bench $arch: $((SECONDS - t0)) s"
done
timeout $((545 - SECONDS + t0)) python3 "$SRC/benchmarks/bench_encoder.py" --device cuda --dtype bfloat16 \
  --fast-vs-dense --repeats 5 --batches 2 --archs qwen2.5-0.5b llama-1b --shapes 512x32 8192x2 \
  --markdown "$OUT/fast-vs-dense.md" > "$OUT/fast-vs-dense.log" 2>&1
tail -3 "$OUT/fast-vs-dense.log"
echo "forward: $((SECONDS - t0)) s"
