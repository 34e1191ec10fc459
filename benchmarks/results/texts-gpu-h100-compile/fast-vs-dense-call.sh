set -uo pipefail
source benchmarks/results/device-setup.sh
cd /tmp
timeout 215 python3 "$SRC/benchmarks/bench_encoder.py" --device cuda --dtype bfloat16 --fast-vs-dense \
  --archs qwen2.5-0.5b llama-1b --shapes 512x32 --paddings 0.3 --repeats 5 --batches 2 2>&1 \
  | grep -v "Warning\|warn" | tee "$OUT/fast-vs-dense-512x32-padded.md"
