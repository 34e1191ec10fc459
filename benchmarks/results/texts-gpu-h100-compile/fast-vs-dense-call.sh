set -uo pipefail
SRC=$(pwd)
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/card.txt"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
rm -rf /tmp/pkg && mkdir -p /tmp/pkg && cp -r nosink /tmp/pkg/nosink
for d in layerspec models corpus evals; do cp -r $d /tmp/pkg/nosink/$d; done
export PYTHONPATH=/tmp/pkg:/tmp/site HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
cd /tmp
timeout 215 python3 "$SRC/benchmarks/bench_encoder.py" --device cuda --dtype bfloat16 --fast-vs-dense \
  --archs qwen2.5-0.5b llama-1b --shapes 512x32 --paddings 0.3 --repeats 5 --batches 2 2>&1 \
  | grep -v "Warning\|warn" | tee "$OUT/fast-vs-dense-512x32-padded.md"
