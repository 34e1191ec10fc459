# The last of nine calls for Qwen2.5-Coder-0.5B-Instruct (calls 1-8: `stash.sh .rf1` .. `.rf8`, carrying pieces of its 491 MB
# GGUF, the first also the two tasks (gzipped `retrieval_full.py export` files) and the transformers and
# gguf wheels; this one the last piece): assemble and check the GGUF, dequantize it to a safetensors folder, then rank SciFact's and
# NFCorpus's full corpora for every test query under F* and its SciFact spec x Token Prepending depths 0 and 2,
# with PromptEOL, `<|im_start|>` first (its sink), float32 with TF32 products. One rankings.npz per run under $OUT.
set -e
[ -f /tmp/w/qwen.gguf.0 ] || exit 3; cp .rf9/* /tmp/w/ && cd /tmp/w && cat qwen.gguf.? > qwen.gguf
rm qwen.gguf.? && echo "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32  qwen.gguf" | sha256sum -c
gunzip -f scifact.json.gz nfcorpus.json.gz && cd - >/dev/null
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/card.txt"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site /tmp/w/*.whl
rm -rf /tmp/pkg && mkdir -p /tmp/pkg && cp -r nosink /tmp/pkg/nosink
for d in layerspec models corpus evals; do cp -r $d /tmp/pkg/nosink/$d; done
export PYTHONPATH=/tmp/pkg:/tmp/site HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
(cd /tmp && python3 -) <<'PY'
from nosink.models.families import make_serializable
from nosink.models.loading import load_stock
model, tokenizer = load_stock("/tmp/w", gguf_file="qwen.gguf")
make_serializable(model)
model.save_pretrained("/tmp/qwen", safe_serialization=True)
tokenizer.save_pretrained("/tmp/qwen")
PY
for task in scifact nfcorpus; do
  python3 benchmarks/retrieval_full.py embed /tmp/w/$task.json /tmp/qwen --template PromptEOL --sink-token "<|im_start|>" \
    --device cuda --tf32 --batch-size 64 --specs "F*" "F* | B*8 | M0B*4" --prepend 0 2 \
    --out "$OUT/qwen0.5b-$task-PromptEOL" >> "$OUT/log.txt" 2>&1 || echo "FAILED: $task"
  tr '\r' '\n' < "$OUT/log.txt" | grep -v "it/s\]$\|batch/s\]$" | tail -3
done
