#!/usr/bin/env bash
# Issue 57, call 2: diag.py, one mode per fresh process, at the Qwen2.5-0.5B shape (code of c757048).
set -uo pipefail
source benchmarks/results/device-setup.sh
t0=$SECONDS
folder=$(python3 -P -c "import sys; sys.path.insert(0, 'benchmarks'); from bench_cold_start import make_folder; print(make_folder('qwen2.5-0.5b', '.gpu/tok'))" 2>/dev/null | tail -1)
echo "folder $folder: $((SECONDS - t0)) s"
D=benchmarks/results/cold-start/diag.py
for mode in eager cudnn-off; do timeout 100 python3 -P $D $mode "$folder" 2>&1 | grep -v "^W1\|^V1\|Warn\|warn"; done
timeout 120 python3 -P $D profile "$folder" > "$OUT/call2-profile.txt" 2>&1; grep -v "^W1\|^V1" "$OUT/call2-profile.txt" | head -45
echo "eager: $((SECONDS - t0)) s"
export TORCHINDUCTOR_CACHE_DIR=/tmp/inductor-fresh
for i in 1 2; do timeout 120 python3 -P $D compile "$folder" 1000 2>&1 | grep -v "^W1\|^V1\|Warn\|warn"; done
echo "compile: $((SECONDS - t0)) s"
