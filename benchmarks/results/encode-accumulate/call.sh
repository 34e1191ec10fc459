#!/usr/bin/env bash
# Issue 28: encode()'s per-batch add at the texts' rows, torch index_add_ against numpy, interleaved in one process.
set -uo pipefail
source benchmarks/results/device-setup.sh
t0=$SECONDS
cd /tmp
for arch in llama-1b qwen2.5-0.5b; do
  timeout $((250 - SECONDS + t0)) python3 -P "$SRC/benchmarks/results/encode-accumulate/probe.py" --arch $arch \
    --tokenizer "$SRC/.gpu/tok" --repeats 4 2>&1 | grep -v "Loading weights\|Writing model\|Warning\|warn" \
    | tee "$OUT/probe-$arch.md"
  echo "$arch: $((SECONDS - t0)) s"
done
