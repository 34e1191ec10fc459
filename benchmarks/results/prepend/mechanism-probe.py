"""What Token Prepending does inside each model (issue 30: why it costs Qwen2.5-Coder-0.5B 0.12-0.34).

Runs the stock model (eager attention) on PromptEOL-framed STS-B dev sentences as nosink frames them, without
Token Prepending ([sink, prompt and text]) and with it ([sink, placeholder, prompt and text], the placeholder
entering as zeros and, before each of layers 1..depth, taking the last token's state: nosink's step, done here
with forward pre-hooks). Prints, per layer, the norms of the states entering it (the sink's, the placeholder's,
the last token's, the other tokens' median; medians over sentences), the mean share of the later tokens'
attention that goes to the sink and to the placeholder, and how far the last token's state leaving the layer is
from the run without (cosine).

    python benchmarks/results/prepend/mechanism-probe.py --models demo gemma-3-270m qwen2.5-0.5b \
        --data ../shared/data/stsb --depth 1 --sentences 32
    python benchmarks/results/prepend/mechanism-probe.py --models qwen2.5-0.5b --sink-token "<|im_start|>" ...
"""

import argparse
import csv
import statistics
from pathlib import Path

import torch
import transformers as tf

from nosink.models import texts as T
from nosink.models.templates import by_name
from nosink.models.weights import resolve_model


def run(model, x: torch.Tensor, depth: int) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """The states entering each layer (and the last's output), and each layer's attention; prepending to ``depth``."""
    hooks = []
    if depth:
        x = x.clone()
        x[0, 1] = 0  # the placeholder enters as zeros
        for layer in model.model.layers[1 : depth + 1]:

            def pre(module, args, kwargs):
                hidden = args[0] if args else kwargs["hidden_states"]
                hidden = hidden.clone()
                hidden[:, 1] = hidden[:, -1]
                if args:
                    return (hidden, *args[1:]), kwargs
                return args, {**kwargs, "hidden_states": hidden}

            hooks.append(layer.register_forward_pre_hook(pre, with_kwargs=True))
    try:
        with torch.no_grad():
            out = model.model(inputs_embeds=x, output_attentions=True, output_hidden_states=True)
    finally:
        for h in hooks:
            h.remove()
    return list(out.hidden_states), list(out.attentions)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--models", nargs="+", default=["demo", "gemma-3-270m", "qwen2.5-0.5b"])
    p.add_argument("--data", type=Path, required=True, help="the STS-B folder (sts-dev.csv)")
    p.add_argument("--sentences", type=int, default=16)
    p.add_argument("--depth", type=int, default=1)
    p.add_argument("--layers", type=int, nargs="+", default=None, help="layers to print (default: a spread)")
    p.add_argument("--sink-token", default="auto", help="as the encoder's sink_token (auto: the BOS token)")
    args = p.parse_args()
    with open(args.data / "sts-dev.csv", encoding="utf-8") as f:
        sentences = [row[5] for row in csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)][: args.sentences]
    template = by_name("PromptEOL")
    for name in args.models:
        folder = resolve_model(name)
        tok = tf.AutoTokenizer.from_pretrained(folder)
        model = tf.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, attn_implementation="eager")
        model.eval()
        depth_all = model.config.num_hidden_layers
        layers = args.layers or sorted({0, 1, 2, 3, 4, 6, depth_all // 2, depth_all - 1})
        sink = T.sink_ids(tok, args.sink_token)
        framed = T.tokenize(tok, sentences, sink=sink + sink, template=template.formats[0], target=template.target)
        embed = model.get_input_embeddings()
        rows: dict[tuple, list[float]] = {}
        for i in range(len(sentences)):
            ids = framed.prefix_ids[i] + framed.text_ids[i] + framed.suffix(i)
            runs = {
                "without": (run(model, embed(torch.tensor([ids[:1] + ids[2:]])).detach(), 0), 0),
                "with": (run(model, embed(torch.tensor([ids])).detach(), args.depth), 1),
            }
            for layer in layers:
                for mode, ((hs, atts), shift) in runs.items():
                    h, a = hs[layer][0], atts[layer][0]  # entering `layer` (index 0: the embeddings); (H, T, T)
                    norms = h.norm(dim=-1)
                    rows.setdefault((layer, mode, "sink"), []).append(norms[0].item())
                    rows.setdefault((layer, mode, "last"), []).append(norms[-1].item())
                    rows.setdefault((layer, mode, "others"), []).append(norms[1 + shift : -1].median().item())
                    rows.setdefault((layer, mode, "to sink"), []).append(a[:, 1 + shift :, 0].mean().item())
                    if shift:
                        rows.setdefault((layer, mode, "placeholder"), []).append(norms[1].item())
                        rows.setdefault((layer, mode, "to placeholder"), []).append(a[:, 2:, 1].mean().item())
                (plain, _), _ = runs["without"]
                (tp, _), _ = runs["with"]
                cos = torch.nn.functional.cosine_similarity(plain[layer + 1][0, -1], tp[layer + 1][0, -1], dim=0)
                rows.setdefault((layer, "with", "cos"), []).append(cos.item())
        first = tok.convert_ids_to_tokens(sink)[0]
        print(f"\n## {name}: sink token {first}, PromptEOL, {len(sentences)} STS-B dev sentences, prepending to "
              f"layer {args.depth}\n")  # fmt: skip
        print("| layer | run | norm: sink | placeholder | last token | others (median) | attention to the sink | "
              "to the placeholder | last token's output, cosine to without |")  # fmt: skip
        print("|---|---|---|---|---|---|---|---|---|")
        for layer in layers:
            for mode in ("without", "with"):
                get = {k: statistics.median(rows[layer, mode, k]) for k in ("sink", "last", "others")}
                share = statistics.fmean(rows[layer, mode, "to sink"])
                ph = f"{statistics.median(rows[layer, mode, 'placeholder']):.1f}" if mode == "with" else "-"
                to_ph = f"{statistics.fmean(rows[layer, mode, 'to placeholder']):.3f}" if mode == "with" else "-"
                cos = f"{statistics.fmean(rows[layer, 'with', 'cos']):.3f}" if mode == "with" else ""
                print(f"| {layer} | {mode} | {get['sink']:.1f} | {ph} | {get['last']:.1f} | {get['others']:.1f} | "
                      f"{share:.3f} | {to_ph} | {cos} |", flush=True)  # fmt: skip
        del model


if __name__ == "__main__":
    main()
