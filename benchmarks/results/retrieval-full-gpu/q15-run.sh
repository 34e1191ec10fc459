# The 20th of 21 calls for Qwen2.5-Coder-1.5B-Instruct (calls 1-19: `stash.sh .rf1` .. `.rf19`, pieces of its
# 1.1 GB GGUF, the first also the task files and wheels): the last piece, assemble.sh, then rank SciFact's full
# corpus for every test query under F* and its Banking77 spec x Token Prepending depths 0 and 2, with PromptEOL and
# the sink as its study had it (`auto`: no BOS, so the first text token; the end-of-text token when prepending),
# float32 with TF32 products. NFCorpus follows in the next call (q15-nfcorpus.sh).
source benchmarks/results/retrieval-full-gpu/assemble.sh .rf20 q15 cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046
python3 benchmarks/retrieval_full.py embed /tmp/w/scifact.json /tmp/q15 --template PromptEOL \
  --device cuda --tf32 --batch-size 64 --specs "F*" "F* | B*18 | M0B*2" --prepend 0 2 \
  --out "$OUT/qwen1.5b-scifact-PromptEOL" >> "$OUT/log.txt" 2>&1 || echo "FAILED: scifact"
tr '\r' '\n' < "$OUT/log.txt" | grep -v "it/s\]$\|batch/s\]$" | tail -6
