# Call 2 of 2 for SmolLM2-135M (call 1: `stash.sh .rf1`): the GGUF's second piece; assemble, check and dequantize it
# (assemble.sh), then rank SciFact's and NFCorpus's full corpora for every test query under 3 specs x Token
# Prepending depths 0/1/2/4, without a template and with PromptEOL (float32, TF32 products). Each run writes one
# rankings.npz under $OUT; `retrieval_full.py score` scores them on the CPU.
source benchmarks/results/retrieval-full-gpu/assemble.sh .rf2 smol b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
for task in scifact nfcorpus; do
  for template in none PromptEOL; do
    t=(); [ $template = none ] || t=(--template $template)
    python3 benchmarks/retrieval_full.py embed /tmp/w/$task.json /tmp/smol "${t[@]}" --device cuda --tf32 \
      --batch-size 64 --specs "F*" "F* | B*15" "F* | B*13 | M0B*2" --prepend 0 1 2 4 \
      --out "$OUT/smollm2-$task-$template" >> "$OUT/log.txt" 2>&1 || echo "FAILED: $task $template"
    tr '\r' '\n' < "$OUT/log.txt" | grep -v "it/s\]$\|it/s]$" | tail -4
  done
done
