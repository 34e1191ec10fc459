#!/usr/bin/env bash
# Issue 28: M0B one call against two on long and padded batches (the forward alone), on a lent H200.
set -uo pipefail
source benchmarks/results/device-setup.sh
python3 -P benchmarks/results/m0b-one-call/long.py 2>&1 | grep -v "Warning\|warn(" | tee "$OUT/long.md"
