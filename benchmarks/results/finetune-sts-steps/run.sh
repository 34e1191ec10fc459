#!/usr/bin/env bash
# Issue 31: choose the number of SimCSE steps on STS-B dev, then score that step's encoder on test.
# Run from the repository root: bash benchmarks/results/finetune-sts-steps/run.sh [WORK]
# The settings are the first run's (../finetune-sts/: batch 16, lr 2e-4), fixed before it ran; the steps tried
# (60, 120, ..., 360: about 30 minutes of this CPU in all) are fixed here. One run, resumed from its checkpoint
# at each of them (the same batches, masks and dropout as an uninterrupted run), each scored on the study's 300
# seeded dev pairs; the step with the best dev score is scored on the full test split.
set -euo pipefail
export HF_HUB_OFFLINE=1
work=${1:-/tmp/ft-steps}
here=benchmarks/results/finetune-sts-steps
py=${PYTHON:-.venv/bin/python}
common=(--task sts --data ../shared/data --objective simcse --max-length 64 --attention-dropout 0.3
        --lora-layers converted --seed 0 --batch-size 16 --lr 2e-4)
resume=()
for steps in 60 120 180 240 300 360; do
  nice -n 5 "$py" benchmarks/finetune_tasks.py "${common[@]}" --steps "$steps" "${resume[@]}" --choose 300 \
    --scores fine-tuned --out "$work/run" --json "$here/dev-$steps.json"
  rm -rf "$work/at-$steps" && mkdir -p "$work/at-$steps"
  cp -r "$work/run/adapter" "$work/run/nosink.json" "$work/at-$steps/"
  resume=(--resume)
done
best=$("$py" - "$here" <<'PY'
import json, sys
from pathlib import Path
runs = {int(p.stem[4:]): json.loads(p.read_text())["scores"]["fine-tuned"]["estimate"] for p in Path(sys.argv[1]).glob("dev-*.json")}
print(max(sorted(runs), key=runs.get))
PY
)
echo "chosen on dev: $best steps"
nice -n 5 "$py" benchmarks/finetune_tasks.py "${common[@]}" --steps "$best" --eval-only --out "$work/at-$best" \
  --json "$here/test.json"
