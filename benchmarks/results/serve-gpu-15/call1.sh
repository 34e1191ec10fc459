#!/usr/bin/env bash
# Issue 29: the CUDA tests of serve-gpu-14's chat stream and compiled chat step (written, never run), then the chats'
# decode step timed as the server runs it, compiled and not, at the Qwen2.5-0.5B and Llama-3.2-1B shapes.
set -uo pipefail
source benchmarks/results/device-setup.sh
t0=$SECONDS
timeout 200 python3 -P -m pytest -q -p no:cacheprovider tests/test_serve_batches.py tests/test_serve_chat.py \
  tests/test_riding.py tests/test_graphs.py -k "gpu or cuda" --tb=short > "$OUT/call1-tests.txt" 2>&1
tail -5 "$OUT/call1-tests.txt"
echo "tests: $((SECONDS - t0)) s"
for arch in qwen2.5-0.5b llama-1b; do
  timeout $((570 - SECONDS + t0)) python3 benchmarks/results/serve-gpu-15/decode-step-gpu.py --arch $arch \
    > "$OUT/call1-decode-$arch.txt" 2>&1
  grep -v "Loading weights\|^W1\|^V1" "$OUT/call1-decode-$arch.txt" | tail -15
  echo "$arch: $((SECONDS - t0)) s"
done
