#!/bin/bash
# Corpus-encoding throughput, 1 vs 2 GPUs (nosink issue 15). Run from the repository root on the device,
# with PYTHONPATH holding .gpu-corpus/pkg (nosink as committed on branch h-corpus) and transformers 5.24.
set -u -o pipefail
G=$(pwd)/.gpu-corpus
mkdir -p /tmp/work && cd /tmp/work  # not the checkout: its nosink/ folder would shadow the carried package
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
python3 -c "import torch, transformers, tokenizers, nosink.models.corpus as c; print('torch', torch.__version__, 'transformers', transformers.__version__, 'tokenizers', tokenizers.__version__, 'gpus', torch.cuda.device_count(), c.__file__)" || exit 1
t=$(date +%s); timeout 75 python3 $G/bench_corpus.py prepare /tmp/b --rows ${ROWS:-200000} ${PREP_ARGS:-} || exit 1
echo "prepare: $(( $(date +%s) - t )) s"; du -sh /tmp/b/model /tmp/b/corpus.jsonl
for n in 1 2; do
  t=$(date +%s)
  timeout $([ $n = 1 ] && echo 150 || echo 90) python3 -m torch.distributed.run --standalone --nproc-per-node $n -m nosink.cli encode-corpus /tmp/b/model --input /tmp/b/corpus.jsonl --out /tmp/b/gpu$n --model-dtype bfloat16 --dtype float16 --batch-size 256 --no-progress 2>&1 | grep -v "Loading weights"
  echo "torchrun --nproc-per-node $n: $(( $(date +%s) - t )) s wall, model loading included"
  cp /tmp/b/gpu$n/manifest.json $OUT/manifest-gpu$n.json
done
python3 $G/bench_corpus.py compare /tmp/b/gpu1 /tmp/b/gpu2 > $OUT/result.json
grep -v '^    ' $OUT/result.json
