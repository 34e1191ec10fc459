#!/usr/bin/env bash
# Issue 29: chat steps riding embedding batches, on CUDA. The CUDA tests of the graphs, riders and chat steps, then
# ride-probe.py (the engine's units timed: a batch alone, a chat step alone, both in turns, riding) on both shapes.
# From the checkout root, with the wheels in .whl/ and a Qwen2.5 tokenizer in .gpu/tok.
set -uo pipefail
source benchmarks/results/device-setup.sh
t0=$SECONDS
python3 -c "import fastapi, transformers, uvicorn; print('imports ok', transformers.__version__)"
timeout 240 python3 -P -m pytest -q -p no:cacheprovider tests/test_riding.py tests/test_graphs.py \
  tests/test_serve_batches.py "tests/test_serve_chat.py" -k "gpu or riding or rider or graph or batch" 2>&1 \
  | tail -25 | tee "$OUT/call1-tests.txt"
echo "tests: $((SECONDS - t0)) s"
cd /tmp
for arch in "qwen2.5-0.5b|F* | M0B*12" "llama-1b|F* | M0B*8"; do
  timeout 150 python3 "$SRC/benchmarks/results/serve-gpu-13/ride-probe.py" --tokenizer "$SRC/.gpu/tok" \
    --arch "${arch%%|*}" --spec "${arch#*|}" 2>&1 | grep -v "Loading weights\|Writing model" \
    | tee -a "$OUT/call1-probe.md"
  echo "probe ${arch%%|*}: $((SECONDS - t0)) s"
done
