set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
rm -rf /tmp/pkg && mkdir -p /tmp/pkg && cp -r nosink /tmp/pkg/nosink
for d in layerspec models corpus evals; do cp -r $d /tmp/pkg/nosink/$d; done
export PYTHONPATH=/tmp/pkg:/tmp/site HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader
(cd tests && timeout 100 python3 -P -m pytest -q -p no:cacheprovider --import-mode=importlib test_serve_chat.py -k "gpu or equals or longer or join" 2>&1 | grep -E "^E|passed|failed|FAILED" | head -20) | tee $OUT/tests.txt
