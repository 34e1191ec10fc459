# The 21st call for Qwen2.5-Coder-1.5B-Instruct, on the machine q15-run.sh left warm (/tmp/pkg, /tmp/site, /tmp/q15
# and the task files in /tmp/w): NFCorpus's full corpus under the same configurations.
export PYTHONPATH=/tmp/pkg:/tmp/site HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
python3 benchmarks/retrieval_full.py embed /tmp/w/nfcorpus.json /tmp/q15 --template PromptEOL \
  --device cuda --tf32 --batch-size 64 --specs "F*" "F* | B*18 | M0B*2" --prepend 0 1 2 4 \
  --out "$OUT/qwen1.5b-nfcorpus-PromptEOL" >> "$OUT/log.txt" 2>&1 || echo "FAILED: nfcorpus"
tr '\r' '\n' < "$OUT/log.txt" | grep -v "it/s\]$\|batch/s\]$" | tail -6
