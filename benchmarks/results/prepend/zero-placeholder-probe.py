"""Where layer 0's attention goes when Token Prepending's placeholder enters as a zero vector (issue 30).

nosink's placeholder is the row's second token and enters the first layer as zeros. After the first norm a zero
vector stays zero, so its key is the key projection's bias: none in SmolLM2 or gemma, a learnt one in Qwen2. This
runs the stock model (eager attention, ``output_attentions``) on PromptEOL-framed STS-B sentences as nosink frames
them ([sink, placeholder, prompt and text]) and prints, for layer 0, the mean share of each later token's
attention that goes to the placeholder and to the sink: with the placeholder as zeros, and as the sink token's own
embedding (a real token in that place), for comparison.

    python benchmarks/results/prepend/zero-placeholder-probe.py --models demo gemma-3-270m qwen2.5-0.5b \
        --data ../shared/data/stsb
"""

import argparse
import csv
from pathlib import Path

import torch
import transformers as tf

from nosink.models import texts as T
from nosink.models.templates import by_name
from nosink.models.weights import resolve_model


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--models", nargs="+", default=["demo", "gemma-3-270m", "qwen2.5-0.5b"])
    p.add_argument("--data", type=Path, required=True, help="the STS-B folder (sts-dev.csv)")
    p.add_argument("--sentences", type=int, default=32)
    args = p.parse_args()
    with open(args.data / "sts-dev.csv", encoding="utf-8") as f:
        sentences = [row[5] for row in csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)][: args.sentences]
    template = by_name("PromptEOL")
    print(
        "| model | q/k/v bias | placeholder as | share to the placeholder | share to the sink |\n|---|---|---|---|---|"
    )
    for name in args.models:
        folder = resolve_model(name)
        tok = tf.AutoTokenizer.from_pretrained(folder)
        model = tf.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, attn_implementation="eager")
        model.eval()
        sink = T.sink_ids(tok, "auto")
        framed = T.tokenize(tok, sentences, sink=sink + sink, template=template.formats[0], target=template.target)
        bias = getattr(model.model.layers[0].self_attn.k_proj, "bias", None) is not None
        embed = model.get_input_embeddings()
        for mode in ("zeros", "sink embedding"):
            to_ph, to_sink = [], []
            for i in range(len(sentences)):
                ids = torch.tensor([framed.prefix_ids[i] + framed.text_ids[i] + framed.suffix(i)])
                x = embed(ids)
                if mode == "zeros":
                    x[0, 1] = 0
                with torch.no_grad():
                    out = model.model(inputs_embeds=x, output_attentions=True)
                attn = out.attentions[0][0]  # (H, T, T): layer 0
                to_ph.append(attn[:, 2:, 1].mean().item())
                to_sink.append(attn[:, 2:, 0].mean().item())
            print(f"| {name} | {'yes' if bias else 'no'} | {mode} | {sum(to_ph) / len(to_ph):.3f} | "
                  f"{sum(to_sink) / len(to_sink):.3f} |", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
