#!/usr/bin/env bash
set -euo pipefail
SRC=$(cd .gpu && pwd); OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$SRC"/whl/*.whl
rm -rf /tmp/pkg && mkdir -p /tmp/pkg && cp -r "$SRC/nosink" /tmp/pkg/nosink
for d in layerspec models evals; do cp -r "$SRC/$d" "/tmp/pkg/nosink/$d"; done
cd /tmp
PYTHONPATH=/tmp/pkg:/tmp/site python3 "$SRC/benchmarks/results/encode-profile.py" "$SRC/benchmarks" "$SRC/tok" 2>&1 | tee "$OUT/profile.txt"
