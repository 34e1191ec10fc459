#!/usr/bin/env bash
# Issue 29: where a served embedding batch's time goes on the GPU (probe/sitecustomize.py's timeline: each batch's
# rows, the GPU's time on it, the GPU's idle time before it), and whether launching fewer, fuller batches behind a
# batch in flight gains (NOSINK_PROBE_BEHIND), Qwen2.5-0.5B shape, 64 x 1 and 16 x 16, three server runs in a row
# on one machine. From the checkout root, with the wheels in .whl/ and a Qwen2.5 tokenizer in .gpu/tok.
set -uo pipefail
source benchmarks/results/device-setup.sh
t0=$SECONDS
cd /tmp
for run in now behind32 behind64; do
  behind=""; [ $run = behind32 ] && behind=32; [ $run = behind64 ] && behind=64
  NOSINK_PROBE_TIMELINE="$OUT/call1-$run-timeline.csv" NOSINK_PROBE_BEHIND=$behind \
  PYTHONPATH=$SRC/benchmarks/results/serve-gpu-11/probe:/tmp/pkg:/tmp/site timeout $((560 - SECONDS + t0)) \
    python3 "$SRC/benchmarks/bench_serve_gpu.py" --arch qwen2.5-0.5b --spec "F* | M0B*12" --tokenizer "$SRC/.gpu/tok" \
    --workers 8 --seconds 8 --loads 64x1 16x16 --json "$OUT/call1-$run-qwen2.5-0.5b.json" 2>&1 \
    | grep -v "Loading weights\|Writing model\|^  workers=" | tee "$OUT/call1-$run-qwen2.5-0.5b.md"
  echo "$run: $((SECONDS - t0)) s"
done
