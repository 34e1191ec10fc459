"""Throughput and memory of EncoderFromDecoder beside the stock model's forward, in one process.

Random weights at a real architecture's size (speed does not depend on weight values):

    python benchmarks/bench_encoder.py                          # SmolLM2-135M shape, CPU, float32
    python benchmarks/bench_encoder.py --device cuda --dtype bfloat16 --arch llama-1b --batch 32 --seq 256

Every spec runs on the same padded batches as the stock ``AutoModel`` forward; the table prints
throughput as a ratio to the stock forward, peak memory (CUDA) and parameter memory.

``--fast-vs-dense`` runs the fast attention path against the dense-mask path (and stock) over several
architectures, shapes and paddings in one process, and writes a markdown table (the GPU table of the
README comes from it; one command, about 3 minutes on one H100):

    python benchmarks/bench_encoder.py --fast-vs-dense --device cuda --dtype bfloat16 \
        --archs llama3-8b-8l qwen2.5-0.5b --shapes 512x32 2048x8 8192x2 --markdown results.md

Padded rows run packed (``pack_padding``, the default above 5% padding); the column ``unpacked / stock``
is the same fast path with ``pack_padding=False``.

``--encode`` times ``encode()`` against the forward alone on the same pre-tokenized, padded batches
(sentences/s at ``--batch``; needs ``--tokenizer``, a tokenizer folder; on CUDA it then counts the synchronizing
calls of one forward loop and one ``encode()``); ``--streams`` times INTER, EXTRA
and EXTEND specs beside the ratio their layer passes predict; ``--compiled`` times ``compile=True``:

    python benchmarks/bench_encoder.py --encode --device cuda --dtype bfloat16 --arch qwen2.5-0.5b \
        --batch 128 --tokenizer PATH/TO/Qwen2.5-0.5B
    python benchmarks/bench_encoder.py --streams --compiled --device cuda --dtype bfloat16
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import Counter
from collections.abc import Sequence

import torch
import transformers as tf

from nosink import EncoderFromDecoder

ARCHS = {
    # SmolLM2-135M's shape
    "smollm2-135m": lambda: tf.LlamaConfig(
        vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
        num_key_value_heads=3, max_position_embeddings=8192, tie_word_embeddings=True,
    ),
    # Llama-3.2-1B's shape
    "llama-1b": lambda: tf.LlamaConfig(
        vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
        num_key_value_heads=8, max_position_embeddings=8192, rope_theta=500000.0,
    ),
    # Qwen2.5-0.5B's shape
    "qwen2-0.5b": lambda: tf.Qwen2Config(
        vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
        num_key_value_heads=2, max_position_embeddings=32768,
    ),
    # Llama-3-8B's shape, cut to its first 8 layers (the attention and MLP shapes are the model's)
    "llama3-8b-8l": lambda: tf.LlamaConfig(
        vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=8, num_attention_heads=32,
        num_key_value_heads=8, max_position_embeddings=8192, rope_theta=500000.0,
    ),
}  # fmt: skip
ARCHS["qwen2.5-0.5b"] = ARCHS["qwen2-0.5b"]  # the same shape, under the name the GPU results use

SPECS = ["F*", "F* | B*8", "F* | M0B*8", "F* | B*4 | M0B*4", "F* | INTER(R*4)", "F* | EXTEND(B*2)"]


def param_bytes(module: torch.nn.Module) -> int:
    return sum(p.numel() * p.element_size() for p in {p.data_ptr(): p for p in module.parameters()}.values())


def batches(n: int, batch: int, seq: int, vocab: int, device: str, seed: int = 0, padding: float | None = None) -> list:
    """Right-padded batches with lengths spread between seq/4 and seq; or, given ``padding``, between
    seq * (1 - 2 * padding) and seq (that share of the tokens is padding on average; 0: every token real)."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        ids = torch.randint(5, vocab, (batch, seq), generator=g)
        shortest = seq // 4 if padding is None else max(1, round(seq * (1 - 2 * padding)))
        lengths = torch.randint(shortest, seq + 1, (batch,), generator=g)
        mask = (torch.arange(seq)[None, :] < lengths[:, None]).long()
        out.append((ids.to(device), mask.to(device)))
    return out


def timed(fn, data, device: str, repeats: int) -> tuple[float, int]:
    """Median seconds per pass over ``data`` and peak CUDA memory (0 on CPU)."""
    with torch.inference_mode():
        for ids, mask in data[:1]:
            fn(ids, mask)  # warm-up
        if device.startswith("cuda"):
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            for ids, mask in data:
                fn(ids, mask)
            if device.startswith("cuda"):
                torch.cuda.synchronize()
            times.append(time.perf_counter() - start)
    peak = torch.cuda.max_memory_allocated() if device.startswith("cuda") else 0
    return statistics.median(times), peak


def default_specs(depth: int) -> list[tuple[str, str]]:
    """The issue's specs for a model of ``depth`` layers: (label, spec), with k = depth / 2."""
    k = depth // 2
    return [
        ("F*", "F*"),
        (f"F* | M0B*{k}", f"F* | M0B*{k}"),
        (f"F* | R*{k}", f"F* | R*{k}"),
        (f"MASK0&BIDIR k={k}", f"F* | B*{k - k // 2} | M0B*{k // 2}"),
    ]


def fast_vs_dense(args: argparse.Namespace) -> None:
    """The fast attention path against the dense-mask path and stock, per architecture, shape and padding."""
    dtype = getattr(torch, args.dtype)
    cuda = args.device.startswith("cuda")
    card = torch.cuda.get_device_name() if cuda else "cpu"
    lines = [
        f"Card: {card}; torch {torch.__version__}, transformers {tf.__version__}, {args.dtype}, sdpa; "
        f"random weights; median of {args.repeats} passes over {args.batches} batches after one warm-up pass.",
        "Ratios are throughput in real tokens/s over the stock `AutoModel` forward on the same batches in the same "
        "process (>1 is faster). `rel diff` = max over real tokens of |fast - dense| / |dense| (L2 per token) "
        "on the last hidden state; for `F*` also `vs stock`: the same measure of dense and of fast against the "
        "stock forward (bf16 kernels round differently; this is the scale of that rounding). "
        "`fast layers` = layers that ran on a fast route / all layer steps.",
        "",
        "| arch | shape | padding | spec | stock tok/s | dense / stock | fast / stock | fast / dense "
        "| peak MiB stock / dense / fast | rel diff | vs stock: dense / fast | fast layers | unpacked / stock |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    print("\n".join(lines), flush=True)
    for arch in args.archs:
        lines += _fast_vs_dense_arch(arch, args, dtype)
        if cuda:
            torch.cuda.empty_cache()
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write("\n".join(lines) + "\n")


def _fast_vs_dense_arch(arch: str, args: argparse.Namespace, dtype: torch.dtype) -> list[str]:
    import nosink.models.attention as attention

    mib = 2**20
    lines = []
    torch.manual_seed(0)
    config = ARCHS[arch]()
    with torch.device(args.device):  # random init on the device: an 8B-shaped model is slow to fill on CPU
        model = tf.AutoModel.from_config(config, dtype=dtype, attn_implementation="sdpa").eval()
    for shape in args.shapes:
        seq, batch = (int(x) for x in shape.split("x"))
        for padding in args.paddings:
            data = batches(args.batches, batch, seq, config.vocab_size, args.device, padding=padding)
            real = sum(int(mask.sum()) for _, mask in data)

            def stock(ids, mask):
                return model(input_ids=ids, attention_mask=mask).last_hidden_state

            base, base_peak = timed(stock, data, args.device, args.repeats)
            for label, spec in args.spec_pairs or default_specs(config.num_hidden_layers):
                fast = EncoderFromDecoder(model, spec, fast_attention=True)
                dense = EncoderFromDecoder(model, spec, fast_attention=False)
                t_dense, peak_dense = timed(lambda i, m, e=dense: e(i, m).last_hidden_state, data, args.device,
                                            args.repeats)  # fmt: skip
                t_fast, peak_fast = timed(lambda i, m, e=fast: e(i, m).last_hidden_state, data, args.device,
                                          args.repeats)  # fmt: skip
                unpacked = "-"
                if padding:
                    padded = EncoderFromDecoder(model, spec, fast_attention=True, pack_padding=False)
                    t_padded, _ = timed(lambda i, m, e=padded: e(i, m).last_hidden_state, data, args.device,
                                        args.repeats)  # fmt: skip
                    unpacked = f"{base / t_padded:.2f}"
                    del padded
                ids, mask = data[0]
                routes: Counter = Counter()
                original = attention.attend

                def counting(q, k, v, route, scale=None, original=original, routes=routes):
                    routes[str(route.kind)] += 1
                    return original(q, k, v, route, scale)

                attention.attend = counting
                try:
                    with torch.inference_mode():
                        a = fast(ids, mask).last_hidden_state.float()
                        b = dense(ids, mask).last_hidden_state.float()
                finally:
                    attention.attend = original
                keep = mask.bool()

                def rel_diff(x, y, keep=keep):
                    return ((x - y).norm(dim=-1) / y.norm(dim=-1).clamp_min(1e-6))[keep].max().item()

                rel = rel_diff(a, b)
                to_stock = "-"
                if spec == "F*":
                    with torch.inference_mode():
                        ref = stock(ids, mask).float()
                    to_stock = f"{rel_diff(b, ref):.1e} / {rel_diff(a, ref):.1e}"
                    del ref
                nan = " NaN!" if torch.isnan(a).any() else ""
                pad = "none" if not padding else f"{padding:.0%}"
                shown = label.replace("|", "\\|")  # a pipe inside a markdown table cell
                row = (
                    f"| {arch} | {seq}x{batch} | {pad} | `{shown}` | {real / base:,.0f} | {base / t_dense:.2f} "
                    f"| {base / t_fast:.2f} | {t_dense / t_fast:.2f} | {base_peak / mib:,.0f} / "
                    f"{peak_dense / mib:,.0f} / {peak_fast / mib:,.0f} | {rel:.1e}{nan} | {to_stock} "
                    f"| {sum(routes.values())}/{len(fast.plan.layer_steps)} | {unpacked} |"
                )
                lines.append(row)
                print(row, flush=True)
                # The check's float32 copies would otherwise sit in memory through the next spec's peak.
                del fast, dense, a, b
    return lines


def _model(arch: str, device: str, dtype: torch.dtype, vocab: int | None = None) -> torch.nn.Module:
    # `vocab`: at least this many token ids (a tokenizer of another model family; only the embedding table grows).
    torch.manual_seed(0)
    config = ARCHS[arch]()
    config.vocab_size = max(config.vocab_size, vocab or 0)
    with torch.device(device):
        return tf.AutoModel.from_config(config, dtype=dtype, attn_implementation="sdpa").eval()


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


WORDS = (
    "the model reads every token of a sentence and writes one vector for it while the layers below keep their "
    "causal masks and the top layers look both ways so that each word sees what comes after it in the text"
).split()


def synthetic_texts(
    n: int, seed: int = 0, words: tuple[int, int] = (8, 100), vocabulary: Sequence[str] = WORDS
) -> list[str]:
    """``n`` texts of ``words`` (at least, at most) words drawn from a small ``vocabulary`` (speed depends on
    length, not meaning)."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(words[0], words[1] + 1, (n,), generator=g).tolist()
    picks = torch.randint(0, len(vocabulary), (sum(lengths),), generator=g).tolist()
    out, at = [], 0
    for n_words in lengths:
        out.append(" ".join(vocabulary[i] for i in picks[at : at + n_words]).capitalize() + ".")
        at += n_words
    return out


def encode_vs_forward(args: argparse.Namespace) -> None:
    """encode() sentences/s against the forward alone on the same pre-tokenized batches (issue 13, item 2)."""
    from transformers import AutoTokenizer

    from nosink.models import batching as _batching
    from nosink.models import texts as _texts

    if not args.tokenizer:
        raise SystemExit("--encode needs --tokenizer PATH (a tokenizer folder of the architecture's model)")
    dtype = getattr(torch, args.dtype)
    card = torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu"
    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    model = _model(args.arch, args.device, dtype, vocab=len(tokenizer))
    texts = synthetic_texts(args.texts)
    widened = model.config.vocab_size != ARCHS[args.arch]().vocab_size
    shape = f"{args.arch} (embedding table widened to {len(tokenizer):,} ids)" if widened else args.arch
    print(f"\nencode() vs forward alone on {card}: {shape}, {args.dtype}, {len(texts)} synthetic texts of "
          f"8-100 words, batch {args.batch}, median of {args.repeats}, interleaved")  # fmt: skip
    print("| spec | pack_padding | tokens/text | forward alone, texts/s | encode_tokens, texts/s | encode(), texts/s "
          "| encode / forward | paired, median [min, max] |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|")
    syncs = []
    for spec in ("F*", f"F* | M0B*{ARCHS[args.arch]().num_hidden_layers // 2}"):
        for pack in (None, True):
            encoder = EncoderFromDecoder(model, spec, tokenizer, pack_padding=pack)
            tokens = _texts.tokenize(tokenizer, texts, None, sink=encoder.sink_ids(), max_length=512)
            groups = _batching.batches(tokens.lengths, args.batch)
            pad_id = _batching.pad_id(tokenizer)
            padded = [_batching.pad(tokens, rows, pad_id) for rows in groups]
            on_device = [(p.input_ids.to(args.device), p.attention_mask.to(args.device)) for p in padded]

            def forward_alone(on_device=on_device, encoder=encoder):
                with torch.inference_mode():
                    for ids, mask in on_device:
                        encoder(ids, mask)

            def through_encode_tokens(groups=groups, tokens=tokens, encoder=encoder):
                for rows in groups:
                    encoder.encode_tokens(tokens, rows)

            def through_encode(encoder=encoder):
                encoder.encode(texts, batch_size=args.batch, show_progress_bar=False)

            fns = (forward_alone, through_encode_tokens, through_encode)
            for fn in fns:
                fn()  # warm-up
            times: list[list[float]] = [[] for _ in fns]
            for _ in range(args.repeats):  # the three interleaved, so that a slow spell of the host hits each alike
                for fn, took in zip(fns, times, strict=True):
                    _sync(args.device)
                    start = time.perf_counter()
                    fn()
                    _sync(args.device)
                    took.append(time.perf_counter() - start)
            row = [len(texts) / statistics.median(took) for took in times]
            # Each pass of encode() against the forward pass timed just before it: a slow spell of the host or the
            # card that spans both cancels out of the ratio, where the medians above can come from different spells.
            paired = [forward / encode for forward, encode in zip(times[0], times[2], strict=True)]
            per_text = sum(tokens.lengths) / len(texts)
            shown = spec.replace("|", "\\|")
            print(f"| `{shown}` | {pack} | {per_text:.0f} | {row[0]:,.0f} | {row[1]:,.0f} | {row[2]:,.0f} "
                  f"| {row[2] / row[0]:.2f} | {statistics.median(paired):.2f} [{min(paired):.2f}, {max(paired):.2f}] |",
                  flush=True)  # fmt: skip
            if args.device.startswith("cuda"):  # after the timings, so that the counting costs them nothing
                counts = [count_syncs(fn) for fn in (forward_alone, through_encode)]
                syncs.append(f"`{shown}`, pack_padding={pack}: forward loop {counts[0]}, encode() {counts[1]} "
                             f"({len(groups)} batches)")  # fmt: skip
    if syncs:
        print("\nsynchronizing calls in one run (torch.cuda.set_sync_debug_mode; event waits not counted):")
        for line in syncs:
            print(f"- {line}")


def count_syncs(fn) -> int:
    """How many synchronizing CUDA calls ``fn()`` makes, as ``torch.cuda.set_sync_debug_mode`` reports them."""
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            fn()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    return sum("synchroniz" in str(w.message) for w in caught)


def streams(args: argparse.Namespace) -> None:
    """INTER / EXTRA / EXTEND specs: measured ratio to stock beside the ratio their layer passes predict."""
    dtype = getattr(torch, args.dtype)
    card = torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu"
    print(f"\nINTER / EXTRA / EXTEND on {card}, {args.dtype}, unpadded, median of {args.repeats}: `expected` = stock "
          "layer passes / layer passes (the issue's target: measured within 5% of it)")  # fmt: skip
    print("| arch | shape | spec | layer passes | expected fast / stock | measured fast / stock "
          "| measured / expected |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    for arch in args.archs:
        model = _model(arch, args.device, dtype)
        depth = model.config.num_hidden_layers
        k = depth // 2
        specs = [f"F* | INTER(R*{k})", f"F* | EXTRA(M0B*{k})", "F* | EXTEND(B*2)"]
        specs.append(f"F* | INTER(B*{k // 2}) | M0B*{k // 2}")
        for shape in args.shapes:
            seq, batch = (int(x) for x in shape.split("x"))
            data = batches(args.batches, batch, seq, model.config.vocab_size, args.device, padding=0.0)

            def stock(ids, mask, model=model):
                return model(input_ids=ids, attention_mask=mask).last_hidden_state

            base, _ = timed(stock, data, args.device, args.repeats)
            for spec in specs:
                fast = EncoderFromDecoder(model, spec, fast_attention=True)
                t, _ = timed(lambda i, m, e=fast: e(i, m).last_hidden_state, data, args.device, args.repeats)
                passes = len(fast.plan.layer_steps)
                expected, measured = depth / passes, base / t
                shown = spec.replace("|", "\\|")
                print(f"| {arch} | {shape} | `{shown}` | {passes} | {expected:.3f} | {measured:.3f} "
                      f"| {measured / expected:.3f} |", flush=True)  # fmt: skip
        del model
        if args.device.startswith("cuda"):
            torch.cuda.empty_cache()


def compiled_rows(args: argparse.Namespace) -> None:
    """compile=True against the uncompiled fast path and stock, padded (packed) and not."""
    dtype = getattr(torch, args.dtype)
    card = torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu"
    print(f"\ncompile=True on {card}, {args.dtype}, median of {args.repeats}; compile time = the first two passes "
          "(graphs for the unpadded and the packed layout), not in the timings")  # fmt: skip
    print("| arch | shape | padding | spec | fast / stock | compiled / stock | compiled / fast | compile s "
          "| max rel diff compiled vs fast |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|")
    for arch in args.compile_archs:
        model = _model(arch, args.device, dtype)
        k = model.config.num_hidden_layers // 2
        for spec in ("F*", f"F* | M0B*{k}"):
            fast = EncoderFromDecoder(model, spec, fast_attention=True)
            comp = EncoderFromDecoder(model, spec, fast_attention=True, compile=True)
            for shape in args.compile_shapes:
                seq, batch = (int(x) for x in shape.split("x"))
                for padding in (0.0, 0.3):
                    data = batches(args.batches, batch, seq, model.config.vocab_size, args.device, padding=padding)

                    def stock(ids, mask, model=model):
                        return model(input_ids=ids, attention_mask=mask).last_hidden_state

                    _sync(args.device)
                    start = time.perf_counter()
                    with torch.inference_mode():
                        for ids, mask in data:
                            comp(ids, mask)
                    _sync(args.device)
                    warm = time.perf_counter() - start
                    base, _ = timed(stock, data, args.device, args.repeats)
                    t_fast, _ = timed(lambda i, m, e=fast: e(i, m).last_hidden_state, data, args.device, args.repeats)
                    t_comp, _ = timed(lambda i, m, e=comp: e(i, m).last_hidden_state, data, args.device, args.repeats)
                    ids, mask = data[0]
                    with torch.inference_mode():
                        a = comp(ids, mask).last_hidden_state.float()
                        b = fast(ids, mask).last_hidden_state.float()
                    keep = mask.bool()
                    rel = ((a - b).norm(dim=-1) / b.norm(dim=-1).clamp_min(1e-6))[keep].max().item()
                    shown = spec.replace("|", "\\|")
                    pad = "none" if not padding else f"{padding:.0%}"
                    print(f"| {arch} | {shape} | {pad} | `{shown}` | {base / t_fast:.2f} | {base / t_comp:.2f} "
                          f"| {t_fast / t_comp:.2f} | {warm:.0f} | {rel:.1e} |", flush=True)  # fmt: skip
        del model
        if args.device.startswith("cuda"):
            torch.cuda.empty_cache()


def kernels(args: argparse.Namespace) -> None:
    """Attention alone, per route, against SDPA with the dense mask (what the dense path runs)."""
    import torch.nn.functional as F

    import nosink.models.attention as attention
    import nosink.models.varlen as varlen
    from nosink.layerspec import Kind, build_mask

    dtype, device = getattr(torch, args.dtype), args.device
    card = torch.cuda.get_device_name() if device.startswith("cuda") else "cpu"
    print(f"\nAttention kernels alone on {card}, {args.dtype}, ms (median of 20)")
    print("| heads (q/kv, dim) | seq x batch | padding | kind | fast route | dense mask | dense / fast |")
    print("|---|---|---|---|---|---|---|")

    def masked(q, k, v, m):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=m)

    def clock(fn, *fn_args) -> float:
        fn(*fn_args)
        times = []
        for _ in range(20):
            if device.startswith("cuda"):
                torch.cuda.synchronize()
            start = time.perf_counter()
            fn(*fn_args)
            if device.startswith("cuda"):
                torch.cuda.synchronize()
            times.append(time.perf_counter() - start)
        return statistics.median(times) * 1e3

    for heads, kv, dim in [(32, 8, 128), (14, 2, 64)]:
        for shape in args.shapes:
            seq, batch = (int(x) for x in shape.split("x"))
            q = torch.randn(batch, heads, seq, dim, dtype=dtype, device=device)
            k, v = (torch.randn(batch, kv, seq, dim, dtype=dtype, device=device) for _ in range(2))
            for padding in args.paddings:
                mask = batches(1, batch, seq, 100, device, padding=padding)[0][1]
                layout = attention.Layout(mask)
                for kind in [Kind("F"), Kind("B"), Kind("R"), Kind("F", 0), Kind("B", 0)]:
                    route = attention.Route(kind, layout)
                    dense = build_mask(kind, mask)
                    kr, vr = k.repeat_interleave(heads // kv, 1), v.repeat_interleave(heads // kv, 1)
                    t_fast = clock(attention.attend, q, k, v, route)
                    t_dense = clock(masked, q, kr, vr, dense)
                    pad = "none" if not padding else f"{padding:.0%}"
                    print(f"| {heads}/{kv}, {dim} | {seq}x{batch} | {pad} | {kind} | {t_fast:.2f} | {t_dense:.2f} "
                          f"| {t_dense / t_fast:.2f} |", flush=True)  # fmt: skip
                if padding:
                    found = varlen._varlen_function
                    varlen._varlen_function = lambda: None
                    try:
                        t_mask = clock(attention.attend, q, k, v, attention.Route(Kind("B"), layout))
                    finally:
                        varlen._varlen_function = found
                    print(f"| {heads}/{kv}, {dim} | {seq}x{batch} | {padding:.0%} | B, key-padding mask instead of "
                          f"varlen | {t_mask:.2f} | | |", flush=True)  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--arch", default="smollm2-135m", choices=sorted(ARCHS))
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    p.add_argument("--attn", default="sdpa", choices=["sdpa", "eager"])
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--batches", type=int, default=4)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--specs", nargs="*", default=SPECS)
    p.add_argument("--fast-vs-dense", action="store_true", help="fast attention path vs dense masks vs stock")
    p.add_argument("--archs", nargs="*", default=["llama3-8b-8l", "qwen2.5-0.5b"], choices=sorted(ARCHS))
    p.add_argument("--shapes", nargs="*", default=["512x32", "2048x8", "8192x2"], help="SEQxBATCH")
    p.add_argument("--paddings", nargs="*", type=float, default=[0.0, 0.3], help="share of padding tokens")
    p.add_argument("--markdown", default=None, help="also write the --fast-vs-dense table to this file")
    p.add_argument("--kernels", action="store_true", help="time the attention routes alone (with --fast-vs-dense)")
    p.add_argument("--encode", action="store_true", help="encode() vs the forward alone on pre-tokenized batches")
    p.add_argument("--tokenizer", default=None, help="tokenizer folder for --encode")
    p.add_argument("--texts", type=int, default=4096, help="synthetic texts for --encode")
    p.add_argument("--streams", action="store_true", help="INTER/EXTRA/EXTEND beside their expected ratio")
    p.add_argument("--compiled", action="store_true", help="compile=True rows")
    p.add_argument("--compile-archs", nargs="*", default=["qwen2.5-0.5b"], choices=sorted(ARCHS))
    p.add_argument("--compile-shapes", nargs="*", default=["512x32", "2048x8"], help="SEQxBATCH for --compiled")
    args = p.parse_args()
    args.spec_pairs = [(s, s) for s in args.specs] if args.specs != SPECS else None
    if args.kernels:
        kernels(args)
    if args.fast_vs_dense:
        fast_vs_dense(args)
    if args.encode:
        encode_vs_forward(args)
    if args.streams:
        streams(args)
    if args.compiled:
        compiled_rows(args)
    if args.kernels or args.fast_vs_dense or args.encode or args.streams or args.compiled:
        return

    dtype = getattr(torch, args.dtype)
    torch.manual_seed(0)
    config = ARCHS[args.arch]()
    model = tf.AutoModel.from_config(config, dtype=dtype, attn_implementation=args.attn).to(args.device).eval()
    data = batches(args.batches, args.batch, args.seq, config.vocab_size, args.device)
    n_texts = args.batches * args.batch

    def stock(ids, mask):
        return model(input_ids=ids, attention_mask=mask).last_hidden_state

    base_time, base_peak = timed(stock, data, args.device, args.repeats)
    device_name = torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu"
    print(f"{args.arch} ({config.num_hidden_layers} layers) on {device_name}, {args.dtype}, {args.attn}; "
          f"{args.batches} batches of {args.batch} x {args.seq} tokens, median of {args.repeats}")  # fmt: skip
    print(f"torch {torch.__version__}, transformers {tf.__version__}, threads {torch.get_num_threads()}\n")
    header = f"{'run':<24} {'texts/s':>9} {'vs stock':>9} {'peak MiB':>9} {'params MiB':>11}  check"
    print(header)
    print("-" * len(header))
    mib = 2**20

    def peak_text(peak: int) -> str:
        return f"{peak / mib:>9.0f}" if args.device.startswith("cuda") else f"{'n/a':>9}"

    # Correctness beside speed: F* against the stock forward (same positions), and no NaN anywhere.
    ids, mask = data[0]
    with torch.inference_mode():
        reference = stock(ids, mask).float()

    def check(encoder: EncoderFromDecoder) -> str:
        with torch.inference_mode():
            out = encoder(ids, mask).last_hidden_state.float()
        nan = "NaN!" if torch.isnan(out).any() else "finite"
        if str(encoder.spec) != "F*":
            return nan
        return f"{nan}, max |F* - stock| = {(out - reference)[mask.bool()].abs().max().item():.2e}"

    print(f"{'stock AutoModel':<24} {n_texts / base_time:>9.1f} {1.0:>8.2f}x {peak_text(base_peak)} "
          f"{param_bytes(model) / mib:>11.1f}")  # fmt: skip
    for spec in args.specs:
        encoder = EncoderFromDecoder(model, spec)
        t, peak = timed(lambda ids, mask, e=encoder: e(ids, mask).last_hidden_state, data, args.device, args.repeats)
        print(f"{spec:<24} {n_texts / t:>9.1f} {base_time / t:>8.2f}x {peak_text(peak)} "
              f"{param_bytes(encoder) / mib:>11.1f}  {check(encoder)}")  # fmt: skip


if __name__ == "__main__":
    main()
