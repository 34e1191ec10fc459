# Sourced by the lent-GPU call scripts, from the checkout root: the card's name into $OUT/card.txt, the wheels in
# .whl/ installed into /tmp/site, the package assembled in /tmp/pkg (nosink with its layerspec, models, corpus and
# evals subpackages, as the installed wheel lays them out), and the environment that imports it from there.
SRC=$(pwd)
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/card.txt"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
rm -rf /tmp/pkg && mkdir -p /tmp/pkg && cp -r nosink /tmp/pkg/nosink
for d in layerspec models corpus evals; do cp -r $d /tmp/pkg/nosink/$d; done
export PYTHONPATH=/tmp/pkg:/tmp/site HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
