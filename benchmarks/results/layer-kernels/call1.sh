#!/usr/bin/env bash
# Issue 28/29: the CUDA tests of the graphs at this commit (the pooled graphs after the review's fixes), then
# probe.py (one layer's kernels at 21 and 128 rows; merged products alone). From the checkout root, with the wheels
# in .whl/ and a Qwen2.5 tokenizer in .gpu/tok.
set -uo pipefail
source benchmarks/results/device-setup.sh
t0=$SECONDS
python3 -c "import fastapi, transformers, uvicorn; print('imports ok', transformers.__version__)"
timeout 200 python3 -P -m pytest -q -p no:cacheprovider tests/test_graphs.py tests/test_prepend.py \
  tests/test_serve_batches.py 2>&1 | tail -15 | tee "$OUT/call1-tests.txt"
echo "tests: $((SECONDS - t0)) s"
cd /tmp
timeout 240 python3 "$SRC/benchmarks/results/layer-kernels/probe.py" "$SRC/.gpu/tok" 2>&1 \
  | grep -v "Loading weights\|Writing model\|LOAD REPORT\|^Key\|^---\|lm_head\|^Notes\|UNEXPECTED" \
  > "$OUT/probe.md"
tail -5 "$OUT/probe.md"
echo "probe: $((SECONDS - t0)) s"
