#!/usr/bin/env bash
# encode() vs forward alone for one architecture's shape (ARCH), the code in .gpu; as encode-ab.sh with VERSIONS=new.
set -euo pipefail
SRC=$(cd .gpu && pwd); OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$SRC"/whl/*.whl
rm -rf /tmp/pkg-new && mkdir -p /tmp/pkg-new && cp -r "$SRC/nosink" /tmp/pkg-new/nosink
for d in layerspec models evals; do cp -r "$SRC/$d" "/tmp/pkg-new/nosink/$d"; done
cd /tmp
PYTHONPATH=/tmp/pkg-new:/tmp/site python3 "$SRC/benchmarks/bench_encoder.py" --device cuda --dtype bfloat16 \
   --encode --arch "${ARCH:?}" --batch 128 --texts ${TEXTS:-4096} --repeats ${REPEATS:-7} --tokenizer "$SRC/tok" 2>&1 \
   | tee "$OUT/encode-$ARCH.md"
