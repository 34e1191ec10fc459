# The last of nine calls for Qwen2.5-Coder-0.5B-Instruct (calls 1-8: `stash.sh .rf1` .. `.rf8`, pieces of its 491 MB
# GGUF, the first also the task files and wheels): the last piece, assemble.sh, then rank SciFact's and NFCorpus's
# full corpora for every test query under F* and its SciFact spec x Token Prepending depths 0 and 2, with
# PromptEOL and `<|im_start|>` first (its sink), float32 with TF32 products.
source benchmarks/results/retrieval-full-gpu/assemble.sh .rf9 qwen 1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32
for task in scifact nfcorpus; do
  python3 benchmarks/retrieval_full.py embed /tmp/w/$task.json /tmp/qwen --template PromptEOL --sink-token "<|im_start|>" \
    --device cuda --tf32 --batch-size 64 --specs "F*" "F* | B*8 | M0B*4" --prepend 0 2 \
    --out "$OUT/qwen0.5b-$task-PromptEOL" >> "$OUT/log.txt" 2>&1 || echo "FAILED: $task"
  tr '\r' '\n' < "$OUT/log.txt" | grep -v "it/s\]$\|batch/s\]$" | tail -3
done
