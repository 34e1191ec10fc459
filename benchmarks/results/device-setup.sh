# Sourced by the lent-GPU call scripts, from the checkout root: the card's name into $OUT/card.txt, the wheels in
# .whl/ installed into /tmp/site, the package assembled in /tmp/pkg (nosink with its layerspec, models, corpus and
# evals subpackages, as the installed wheel lays them out), and the environment that imports it from there;
# `old_package` lays out an earlier commit's package from .gpu/old in /tmp/pkgold the same way.
SRC=$(pwd)
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/card.txt"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
rm -rf /tmp/pkg && mkdir -p /tmp/pkg && cp -r nosink /tmp/pkg/nosink
for d in layerspec models corpus evals; do cp -r $d /tmp/pkg/nosink/$d; done
export PYTHONPATH=/tmp/pkg:/tmp/site HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1

# The package of an earlier commit (a `git archive` of it in .gpu/old, or in the folder given) laid out in /tmp/pkgold
# (or /tmp/pkg<the folder's name>) as /tmp/pkg is.
old_package() {
    local from=${1:-.gpu/old} to=/tmp/pkg$(basename "${1:-.gpu/old}")
    rm -rf "$to" && mkdir -p "$to" && cp -r "$from/nosink" "$to/nosink"
    for d in layerspec models corpus evals; do cp -r "$from/$d" "$to/nosink/$d"; done
}
