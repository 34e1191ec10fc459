#!/bin/bash
# Which change made one-GPU corpus encoding slower (7693582 vs d631252)? One process, no torchrun.
set -u -o pipefail
G=$(pwd)/.gpu-corpus; B=/tmp/d; SITE=/tmp/site; mkdir -p $B/work
python3 -m pip install -q --no-index --no-deps --no-compile --target $SITE "$G"/whl/*.whl
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=4
cd $B/work
nvidia-smi --query-gpu=name --format=csv,noheader
PYTHONPATH=$SITE:$G/pkg timeout 100 python3 "$G"/bench_corpus.py prepare $B --rows ${ROWS:-80000} 2>&1 | grep -v Writing
ARGS="$B/model --input $B/corpus.jsonl --model-dtype bfloat16 --dtype float16 --batch-size 256 --no-progress"
run() { name=$1; shift; rm -rf $B/out-$name; t=$(date +%s); timeout 120 "$@" 2>&1 | grep -v "Loading weights" | grep "encoded"; echo "$name: $(( $(date +%s) - t )) s wall"; }
run new-ids env PYTHONPATH=$SITE:$G/pkg python3 -m nosink.cli encode-corpus $ARGS --id-field id --out $B/out-new-ids
run new-noids env PYTHONPATH=$SITE:$G/pkg python3 -m nosink.cli encode-corpus $ARGS --out $B/out-new-noids
run new-syncread env PYTHONPATH=$SITE:$G/pkg python3 -c "
import sys, nosink.models.corpus as c
class Sync:
    def __init__(self, items, name): self.items = items
    def __iter__(self): return iter(self.items)
    def close(self): pass
c._Prefetch = Sync
from nosink.cli import main
sys.exit(main(sys.argv[1:]))" encode-corpus $ARGS --out $B/out-new-syncread
run old-noids env PYTHONPATH=$SITE:$G/pkg-old python3 -m nosink.cli encode-corpus $ARGS --out $B/out-old-noids
run new-ids-again env PYTHONPATH=$SITE:$G/pkg python3 -m nosink.cli encode-corpus $ARGS --id-field id --out $B/out-new-ids2
