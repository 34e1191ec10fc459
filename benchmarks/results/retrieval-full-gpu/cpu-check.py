"""The GPU's rankings against this CPU (float32, no TF32): a few queries' top documents re-encoded here under the
same configuration through the same EmbeddingCache; their cosine similarities should match the ones the H200
ranked by, to TF32's precision.

    python benchmarks/results/retrieval-full-gpu/cpu-check.py TASK.json RANKINGS_FOLDER CONFIG_INDEX MODEL
"""

import json
import sys

import numpy as np

from nosink import EncoderFromDecoder
from nosink.evals.study import Candidate, EmbeddingCache, RetrievalTask

task_file, folder, i, model = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
d = json.load(open(task_file))
task = RetrievalTask(d["name"], relevant=d["relevant"], query_instruction=d["query_instruction"],
                     **{k: [tuple(x) for x in d[k]] for k in ("choose", "report", "corpus")})  # fmt: skip
data = np.load(f"{folder}/rankings.npz")
meta = json.loads(str(data["meta"]))
config = meta["configs"][i]
plain = EncoderFromDecoder.from_pretrained(model, "F*")
encoder = plain if not config["prepend"] else EncoderFromDecoder.from_model(
    plain.decoder, "F*", plain.tokenizer, prepend=config["prepend"]
)  # fmt: skip
template = meta["template"]
cache = EmbeddingCache(encoder, template, None if template else task.instruction, 8, meta["max_length"],
                       pooling=meta["pooling"])  # fmt: skip
cand = Candidate("c", config["spec"])
text_of = dict(task.choose + task.report)
worst = 0.0
for row in (0, 150, len(meta["queries"]) - 1):
    qid = meta["queries"][row]
    docs = [task.corpus[j][1] for j in data[f"idx{i}"][row][:3]]
    v = cache.vectors([cand], [text_of[qid], *docs])[cand.name]
    v = v / np.linalg.norm(v, axis=1, keepdims=True)
    here, there = v[1:] @ v[0], data[f"sim{i}"][row][:3]
    worst = max(worst, float(np.abs(here - there).max()))
    print(f"{config} query {qid}: cosine here {np.round(here, 5).tolist()}, on the H200 {np.round(there, 5).tolist()}")
print(f"largest difference: {worst:.2e}")
