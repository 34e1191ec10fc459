"""Probe: where Token Prepending's placeholder sits, on SmolLM2-135M, STS-B dev, PromptEOL, last token.

nosink puts the placeholder right after the sink token; the authors' code puts a new token inside the prompt,
before the text (``This sentence : <PST> "text" ...``), with a random embedding. This probe runs the stock model
one text at a time with forward pre-hooks (the placeholder enters as zeros or a random vector; before each layer
of the range it takes the last token's state), so both places compare without a second implementation:

    python benchmarks/prepend_placement.py DATA/stsb

Prints Spearman on 200 seeded STS-B dev pairs per configuration (``plain``: no placeholder).
"""

from __future__ import annotations

import sys
import time

import numpy as np
import torch

from nosink import EncoderFromDecoder
from nosink.evals import stats
from nosink.evals.study.loaders import load_sts
from nosink.models.weights import model_path

PROMPT = 'This sentence : "{text}" means in one word:"'
CONFIGS = [("plain", (0, 0), "zeros"), ("after_sink", (1, 4), "zeros"), ("before_text", (1, 4), "zeros"),
           ("before_text", (1, 4), "random")]  # fmt: skip


def main() -> None:
    torch.set_num_threads(1)
    task = load_sts(sys.argv[1], 200, 10)
    pairs = task.choose
    texts = list(dict.fromkeys(t for a, b, _ in pairs for t in (a, b)))
    encoder = EncoderFromDecoder.from_pretrained(model_path("demo"), "F*")
    model, tok, sink = encoder.decoder, encoder.tokenizer, encoder.sink_ids()
    scale = model.embed_tokens.weight.std()
    random = torch.randn(model.config.hidden_size, generator=torch.Generator().manual_seed(0)) * scale

    def ids_of(text: str) -> list[int]:
        return tok(text, add_special_tokens=False)["input_ids"]

    def variant(name: str, text: str) -> tuple[list[int], int | None]:
        if name == "plain":
            return [*sink, *ids_of(PROMPT.format(text=text))], None
        if name == "after_sink":
            return [*sink, 0, *ids_of(PROMPT.format(text=text))], len(sink)
        head = [*sink, *ids_of("This sentence :")]
        return [*head, 0, *ids_of(f' "{text}" means in one word:"')], len(head)

    def last_state(ids: list[int], slot: int | None, layers: tuple[int, int], init: torch.Tensor | float) -> np.ndarray:
        def hook(i: int):
            def fn(module, args, kwargs):
                h = (args[0] if args else kwargs["hidden_states"]).clone()
                if slot is not None:
                    if i == 0:
                        h[:, slot] = init
                    if layers[0] <= i < layers[1]:
                        h[:, slot] = h[:, -1]
                return ((h, *args[1:]), kwargs) if args else (args, {**kwargs, "hidden_states": h})

            return fn

        handles = [layer.register_forward_pre_hook(hook(i), with_kwargs=True) for i, layer in enumerate(model.layers)]
        try:
            with torch.no_grad():
                return model(input_ids=torch.tensor([ids]))[0][0, -1].float().numpy()
        finally:
            for handle in handles:
                handle.remove()

    for name, layers, init in CONFIGS:
        start = time.time()
        vec = {}
        for text in texts:
            ids, slot = variant(name, text)
            vec[text] = last_state(ids, slot, layers, random if init == "random" else 0.0)
        a, b = np.stack([vec[p[0]] for p in pairs]), np.stack([vec[p[1]] for p in pairs])
        cosines = (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
        score = stats.spearman(cosines, [p[2] for p in pairs])()
        print(f"{name:12s} prepend before layers {layers[0]}..{layers[1] - 1}, placeholder enters as {init}: "
              f"spearman {score:.4f} ({time.time() - start:.0f} s)", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
