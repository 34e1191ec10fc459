#!/usr/bin/env bash
# Device call 3: why a chat step is slow (both shapes), and encode() of F* and M0B (issue 28's rows) again.
set -uo pipefail
source benchmarks/results/device-setup.sh
t0=$SECONDS
for arch in qwen2.5-0.5b llama-1b; do
    spec="F* | M0B*12"; [ $arch = llama-1b ] && spec="F* | M0B*8"
    timeout 150 python3 -P benchmarks/results/chat-step-probe.py --arch $arch --spec "$spec" --tokenizer .gpu/tok 2>&1 \
        | grep -v "Loading weights\|Writing model" | tee "$OUT/chat-step-$arch.md"
    echo "chat $arch: $((SECONDS - t0)) s"
done
for arch in qwen2.5-0.5b llama-1b; do
    spec="F* | M0B*12"; [ $arch = llama-1b ] && spec="F* | M0B*8"
    timeout $((560 - SECONDS)) python3 -P benchmarks/bench_texts_gpu.py --arch $arch --tokenizer .gpu/tok --texts 8192 \
        --repeats 3 --no-st --specs "F*" "$spec" --json "$OUT/texts-$arch.json" 2>&1 | grep -v "Warning\|Loading weights" \
        | tee "$OUT/texts-$arch.md"
    echo "texts $arch: $((SECONDS - t0)) s"
done
