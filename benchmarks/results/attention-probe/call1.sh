#!/usr/bin/env bash
# Issue 28 on a lent H200: attention kernels on packed batches of short rows. From the checkout root.
set -uo pipefail
source benchmarks/results/device-setup.sh
timeout 560 python3 -P benchmarks/results/attention-probe/probe.py --tokenizer .gpu/tok 2>&1 \
    | grep -v "Warning\|warn(" | tee "$OUT/probe.md"
