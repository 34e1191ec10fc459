# The last of five calls for gemma-3-270m (calls 1-4: `stash.sh .rf1` .. `.rf4`, pieces of its 253 MB GGUF, the
# first also the gzipped `retrieval_full.py export` files and the transformers and gguf wheels): the last piece,
# assemble.sh, then rank SciFact's and NFCorpus's full corpora for every test query under the study's gemma specs x
# Token Prepending depths 0 and 2, without a template and with PromptEOL (float32, TF32 products).
source benchmarks/results/retrieval-full-gpu/assemble.sh .rf5 gemma a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
for task in scifact nfcorpus; do
  for template in none PromptEOL; do
    t=(); [ $template = none ] || t=(--template $template)
    python3 benchmarks/retrieval_full.py embed /tmp/w/$task.json /tmp/gemma "${t[@]}" --device cuda --tf32 \
      --batch-size 64 --specs "F*" "F* | B*9" "F* | B*5 | M0B*4" --prepend 0 2 \
      --out "$OUT/gemma-$task-$template" >> "$OUT/log.txt" 2>&1 || echo "FAILED: $task $template"
    tr '\r' '\n' < "$OUT/log.txt" | grep -v "it/s\]$\|batch/s\]$" | tail -3
  done
done
