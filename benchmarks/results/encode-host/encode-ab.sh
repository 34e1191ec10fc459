#!/usr/bin/env bash
# encode() vs forward alone, new code (.gpu) then the code before it (.gpu/old), same machine, one call.
set -euo pipefail
SRC=$(cd .gpu && pwd); OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$SRC"/whl/*.whl
for v in ${VERSIONS:-new old}; do
  rm -rf /tmp/pkg-$v && mkdir -p /tmp/pkg-$v
  base=$SRC; [ $v = old ] && base=$SRC/old
  cp -r "$base/nosink" /tmp/pkg-$v/nosink
  for d in layerspec models evals; do cp -r "$base/$d" "/tmp/pkg-$v/nosink/$d"; done
done
cd /tmp
nvidia-smi --query-gpu=name --format=csv,noheader | tee "$OUT/card.txt"; nproc
for v in ${VERSIONS:-new old}; do
  echo "== $v"
  PYTHONPATH=/tmp/pkg-$v:/tmp/site python3 "$SRC/benchmarks/bench_encoder.py" --device cuda --dtype bfloat16 \
     --encode --arch qwen2.5-0.5b --batch 128 --texts ${TEXTS:-8192} --repeats ${REPEATS:-5} --tokenizer "$SRC/tok" 2>&1 | tee "$OUT/encode-$v.md"
done
