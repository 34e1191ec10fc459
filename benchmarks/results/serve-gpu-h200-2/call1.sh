#!/usr/bin/env bash
# Device call 1: CUDA tests, the serving load at this commit (4 and 8 front-ends), and the same loads at the
# code before this session's serving changes (ed8d762, a copy in .gpu/old) on the same machine.
set -uo pipefail
source benchmarks/results/device-setup.sh
t0=$SECONDS
timeout 120 python3 -P -m pytest -q -x -p no:cacheprovider tests/test_graphs.py 2>&1 | tail -4 | tee "$OUT/tests.txt"
echo "tests: $((SECONDS - t0)) s"
SECONDS_EACH=10 bash benchmarks/results/serve-gpu-run.sh qwen2.5-0.5b "F* | M0B*12" "4 8" 2>&1 | grep -v "Loading weights\|Writing model"
echo "new: $((SECONDS - t0)) s"
rm -rf /tmp/oldpkg && mkdir -p /tmp/oldpkg && cp -r .gpu/old/nosink /tmp/oldpkg/nosink
for d in layerspec models corpus evals; do cp -r .gpu/old/$d /tmp/oldpkg/nosink/$d; done
cd /tmp && PYTHONPATH=/tmp/oldpkg:/tmp/site timeout $((590 - SECONDS)) python3 "$SRC/.gpu/old/benchmarks/bench_serve_gpu.py" \
    --arch qwen2.5-0.5b --spec "F* | M0B*12" --tokenizer "$SRC/.gpu/tok" --workers 4 --seconds 10 \
    --loads 64x1 16x16 "64x1 + 8 chats" --json "$OUT/old-qwen2.5-0.5b.json" 2>&1 | grep -v "Loading weights\|Writing model" | tee "$OUT/old-qwen2.5-0.5b.md"
echo "old: $((SECONDS - t0)) s"
