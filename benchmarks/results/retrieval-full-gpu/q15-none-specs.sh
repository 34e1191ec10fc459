# The last of a second sequence of 20 calls for Qwen2.5-Coder-1.5B-Instruct (`stash.sh .rf1` .. `.rf19`, then this,
# on a fresh machine): the masks without a template (the paper's instruction on queries, mean pooling), where
# `F* | B*18 | M0B*2` had moved SciFact from 0.285 to 0.421: six specs at depth 0 on both full corpora.
source benchmarks/results/retrieval-full-gpu/assemble.sh .rf20 q15 cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046
for t in scifact nfcorpus; do
  python3 benchmarks/retrieval_full.py embed /tmp/w/$t.json /tmp/q15 --device cuda --tf32 --batch-size 64 \
    --specs "F*" "F* | M0B*4" "F* | M0B*8" "F* | B*10 | M0B*4" "F* | B*14" "F* | B*22 | M0B*2" --prepend 0 \
    --out "$OUT/qwen1.5b-$t-none-specs" >> "$OUT/log.txt" 2>&1 || echo "FAILED: $t"
done
tr '\r' '\n' < "$OUT/log.txt" | grep -v "it/s\]$\|batch/s\]$" | grep "prepend\|FAIL\|Error"
