#!/usr/bin/env bash
# The engine probe at d9f6f62 (its package laid out in /tmp/pkgold from .gpu/old, as device-setup.sh's old_package
# does) and at this checkout, without and with the start-up heap frozen, twice each; then one run of each code
# sampled by py-spy (py-spy on the PATH). From the checkout root, with the project's venv active.
set -uo pipefail
out=benchmarks/results/serve-gpu-10
probe=$out/engine-probe.py
rm -rf /tmp/pkgold && mkdir -p /tmp/pkgold && cp -r .gpu/old/nosink /tmp/pkgold/nosink
for d in layerspec models corpus evals; do cp -r ".gpu/old/$d" "/tmp/pkgold/nosink/$d"; done
for round in 1 2; do
  echo "d9f6f62"; PYTHONPATH=/tmp/pkgold PROF=0 SECS=8 python -P "$probe" | head -3
  echo "this code"; PROF=0 SECS=8 python "$probe" | head -3
  echo "this code, FREEZE=1"; FREEZE=1 PROF=0 SECS=8 python "$probe" | head -3
done > "$out/engine-probe-freeze.txt" 2>&1
for code in old new; do
  path=; [ $code = old ] && path=/tmp/pkgold
  PYTHONPATH=$path PROF=0 SECS=14 python -P "$probe" > /tmp/probe-$code.txt 2>&1 &
  sleep 7
  pid=$(pgrep -f "serve-gpu-10/engine-probe.py" | head -1)
  py-spy record -p "$pid" -d 5 -r 250 --gil --threads --nonblocking -f raw -o /tmp/spy-$code.txt > /dev/null 2>&1
  wait
  python -c "
import sys; sys.path.insert(0, 'benchmarks')
from pathlib import Path
from bench_serve_gpu import samples_summary
print(samples_summary(Path('/tmp/spy-$code.txt'), 'engine probe, $code', 5, top=20))
" > "$out/engine-probe-spy-$code.txt"
done
