# The last of five calls for gemma-3-270m (calls 1-4: `stash.sh .rf1` .. `.rf4`, carrying pieces of its 253 MB
# GGUF, the first also the two tasks (gzipped `retrieval_full.py export` files) and the transformers and
# gguf wheels; this one the last piece): assemble and check the GGUF, dequantize it to a safetensors folder, then rank SciFact's and
# NFCorpus's full corpora for every test query under the study's gemma specs x Token Prepending depths 0 and 2,
# without a template and with PromptEOL (float32, TF32 products). One rankings.npz per run under $OUT.
set -e
[ -f /tmp/w/gemma.gguf.0 ] || exit 3; cp .rf5/* /tmp/w/ && cd /tmp/w && cat gemma.gguf.0 gemma.gguf.1 gemma.gguf.2 gemma.gguf.3 gemma.gguf.4 > gemma.gguf
rm gemma.gguf.? && echo "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818  gemma.gguf" | sha256sum -c
gunzip -f scifact.json.gz nfcorpus.json.gz && cd - >/dev/null
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/card.txt"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site /tmp/w/*.whl
rm -rf /tmp/pkg && mkdir -p /tmp/pkg && cp -r nosink /tmp/pkg/nosink
for d in layerspec models corpus evals; do cp -r $d /tmp/pkg/nosink/$d; done
export PYTHONPATH=/tmp/pkg:/tmp/site HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
(cd /tmp && python3 -) <<'PY'
from nosink.models.families import make_serializable
from nosink.models.loading import load_stock
model, tokenizer = load_stock("/tmp/w", gguf_file="gemma.gguf")
make_serializable(model)
model.save_pretrained("/tmp/gemma", safe_serialization=True)
tokenizer.save_pretrained("/tmp/gemma")
PY
for task in scifact nfcorpus; do
  for template in none PromptEOL; do
    t=(); [ $template = none ] || t=(--template $template)
    python3 benchmarks/retrieval_full.py embed /tmp/w/$task.json /tmp/gemma "${t[@]}" --device cuda --tf32 \
      --batch-size 64 --specs "F*" "F* | B*9" "F* | B*5 | M0B*4" --prepend 0 2 \
      --out "$OUT/gemma-$task-$template" >> "$OUT/log.txt" 2>&1 || echo "FAILED: $task $template"
    tr '\r' '\n' < "$OUT/log.txt" | grep -v "it/s\]$\|batch/s\]$" | tail -3
  done
done
