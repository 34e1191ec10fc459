#!/bin/bash
# Corpus-encoding throughput, 1 vs 2 GPUs (nosink issue 15). Run from the repository root on the device, with
# the git-ignored folder .gpu-corpus carried: pkg/ (nosink as committed, commit in pkg/COMMIT), whl/ (transformers
# 5.24.0; the device has 5.17) and bench_corpus.py. Writes result.json, the manifests and the log under $OUT.
#   bash benchmarks/results/corpus-h100x2-run.sh 2>&1 | tee $OUT/log.txt
# Every step has a timeout (475 s in all); the run before these changes took about 5 minutes.
set -u -o pipefail
G=$(pwd)/.gpu-corpus
OUT=${OUT:-/tmp/out}; B=${B:-/tmp/b}; SITE=${SITE:-/tmp/site}; mkdir -p "$OUT" "$B"; rm -rf "$B"/gpu1 "$B"/gpu2  # a warm machine keeps /tmp
timeout 40 python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target $SITE "$G"/whl/*.whl \
  || { echo "pip install of the carried wheel failed"; exit 1; }
export PYTHONPATH=$SITE:$G/pkg PYTHONUNBUFFERED=1 OMP_NUM_THREADS=4  # the same threads a process in both runs
mkdir -p $B/work && cd $B/work  # not the checkout: its nosink/ folder would shadow the carried package
echo "nosink commit: $(cat "$G"/pkg/COMMIT 2>/dev/null || echo unknown)"
nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader || exit 1
timeout 40 python3 -c "import torch, transformers, tokenizers, nosink.models.corpus as c; print('torch', torch.__version__, 'transformers', transformers.__version__, 'tokenizers', tokenizers.__version__, 'gpus', torch.cuda.device_count(), [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())], c.__file__)" || exit 1
t=$(date +%s); timeout 110 python3 "$G"/bench_corpus.py prepare $B --rows "${ROWS:-200000}" ${PREP_ARGS:-} || { echo "prepare failed or timed out"; exit 1; }
echo "prepare: $(( $(date +%s) - t )) s"; du -sh $B/model $B/corpus.jsonl
for n in 1 2; do
  t=$(date +%s)
  timeout "$([ $n = 1 ] && echo 150 || echo 100)" python3 -m torch.distributed.run --standalone --nproc-per-node $n \
    -m nosink.cli encode-corpus $B/model --input $B/corpus.jsonl --id-field id --out $B/gpu$n \
    --model-dtype bfloat16 --dtype float16 --batch-size 256 --no-progress 2>&1 | grep -v "Loading weights"
  rc=$?
  echo "torchrun --nproc-per-node $n: exit $rc, $(( $(date +%s) - t )) s wall, model loading included"
  cp $B/gpu$n/manifest.json "$OUT"/manifest-gpu$n.json || { echo "no manifest for $n GPU(s)"; exit 1; }
done
timeout 45 python3 "$G"/bench_corpus.py compare $B/gpu1 $B/gpu2 > "$OUT"/result.json || { echo "compare failed"; exit 1; }
grep -v '^    ' "$OUT"/result.json
