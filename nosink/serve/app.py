"""Assembling a server from a model: the encoder on the model's own tensors, the engine, the routes.

``create_app(model, tokenizer, spec)`` checks what it is given, builds the encoder with
:meth:`EncoderFromDecoder.from_model` (its parameters are the LM's tensors), compiles each embedding
configuration's plan once, builds an :class:`Engine` that runs both, and serves them with
:func:`~nosink.serve.routes.build_app`.
"""

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from nosink.checks import printable
from nosink.layerspec import Spec
from nosink.models import EncoderFromDecoder
from nosink.serve.configs import Config, configs_of
from nosink.serve.engine import Engine
from nosink.serve.limits import Limits
from nosink.serve.loading import check_api_key
from nosink.serve.routes import build_app
from nosink.serve.served import Embedding, Served


def model_id(name_or_path: str) -> str:
    """The model id a server gives by default: the last part of the hub id or folder, ``"model"`` if none."""
    path = Path(name_or_path)
    if name_or_path and path.is_dir():
        path = path.resolve()  # "." is the folder's own name
    return path.name or "model"


def create_app(
    model: torch.nn.Module,
    tokenizer: Any,
    spec: str | Spec | Config | Mapping[str, str | Spec | Config],
    *,
    name: str | None = None,
    chat: bool = True,
    prompts: dict[str, str] | None = None,
    api_key: str | None = None,
    limits: Limits | None = None,
    sink_token: str = "auto",
    cuda_graphs: bool = True,
    prepend: int | tuple[int, int] | None = None,
    chat_riding: bool = False,
    chat_stream: bool = False,
    chat_compile: bool = False,
) -> Any:
    """An OpenAI-compatible FastAPI app serving chat and embeddings from ``model``'s one set of weights.

    ``app.state.encoder`` (``EncoderFromDecoder.from_model(model, spec, tokenizer)``) and ``app.state.model``
    are two views of the same tensors.

    Args:
        model: a causal LM (with its head); a bare decoder serves embeddings only (``chat=False``).
        tokenizer: the model's tokenizer; chat needs its chat template.
        spec: the embeddings' layer spec, e.g. ``"F* | M0B*10"``, served under ``name``; or several
            configurations by model id, ``{"sts": "F* | M0B*8 @ exit 20", "eol": "F* | B*4 @ template PromptEOL"}``
            (a string ``SPEC[ @ exit M][ @ template T]``, a :class:`Spec` or a :class:`~nosink.serve.Config`; see
            :mod:`nosink.serve.configs`). The encoder (``app.state.encoder``) is built with the first one.
        name: the model id of chat, and of a configuration given without a name; by default the last part of the
            model's hub id or folder, else ``"model"``.
        chat: serve ``/v1/chat/completions``.
        prompts: named instructions for embeddings (``{"query": "Instruct: ...\\nQuery: "}``), used only when
            a request names one in ``prompt_name``.
        api_key: if given, every ``/v1`` request needs ``Authorization: Bearer <api_key>``.
        limits: request limits and batching (see :class:`Limits`).
        sink_token: as for :class:`EncoderFromDecoder`.
        cuda_graphs: as for :class:`EncoderFromDecoder` (embedding batches replay CUDA graphs on a GPU in
            float16/bfloat16; ``False`` runs every batch as it is).
        prepend: Token Prepending for every embedding configuration (as for :class:`EncoderFromDecoder`; the
            placeholder is a token of the input, so the configurations of one server agree on it). Chat never
            sees it.
        chat_riding: experimental: chat steps ride embedding batches where they can (one forward for both; see
            :mod:`nosink.serve.engine`); ``False`` (the default): the two take turns.
        chat_stream: experimental: on a GPU, chat steps run on a CUDA stream of their own, beside the embedding
            batch in flight (see :mod:`nosink.serve.engine`); not with ``chat_riding``.
        chat_compile: experimental: chat decode steps run through ``torch.compile`` (fewer, fused kernels),
            compiled when the engine starts (minutes on a GPU; see :mod:`nosink.serve.kv`), before the server
            accepts connections (``ServerThread.start``'s ``timeout`` does not count it).

    Raises:
        ImportError: if FastAPI is not installed (``pip install "nosink[serve]"``).
        ValueError: for a missing tokenizer, chat without an LM head or a chat template, an empty
            ``api_key``, prompts that are not names mapped to strings, a malformed configuration, an exit
            layer past the model's depth, or a template of several prompts.
        SpecError: if a spec does not fit the model (or its first ``exit_layer`` layers).
    """
    limits = limits or Limits()
    if tokenizer is None:
        raise ValueError("the server needs the model's tokenizer")
    check_api_key(api_key)
    prompts = dict(prompts or {})
    for key, text in prompts.items():
        if not isinstance(key, str) or not key or not isinstance(text, str):
            raise ValueError(f"prompts must map names to strings, got {printable(repr(key))}")
    if chat and (getattr(model, "get_output_embeddings", lambda: None)() is None):
        raise ValueError(
            "chat needs a causal LM with its head (AutoModelForCausalLM); pass chat=False to serve embeddings only"
        )
    if chat and not getattr(tokenizer, "chat_template", None):
        raise ValueError("the tokenizer has no chat template: chat needs one (or pass chat=False)")
    configs = configs_of(spec, "")  # "": the model's own id, known once the encoder names it
    first = next(iter(configs.values()))
    encoder = EncoderFromDecoder.from_model(
        model,
        first.spec,
        tokenizer,
        sink_token=sink_token,
        exit_layer=first.exit_layer,
        cuda_graphs=cuda_graphs,
        prepend=prepend,
    )
    sink = encoder.sink_ids()
    name = name or model_id(encoder.name_or_path)
    configs = {key or name: config for key, config in configs.items()}
    # Compiled once: a configuration without an exit runs every layer, whatever the encoder's own exit.
    full = None if encoder.exit_layer is None else encoder.depth
    plans = {
        key: encoder.plan_for(config.spec, exit_layer=config.exit_layer or full) for key, config in configs.items()
    }
    dims = encoder.config.hidden_size
    embeddings = {
        key: Embedding(key, config.spec, config.exit_layer, config.template, dims) for key, config in configs.items()
    }
    positions = getattr(encoder.config, "max_position_embeddings", None)
    engine = Engine(encoder, model if chat else None, tokenizer, limits, plans, chat_riding, chat_stream, chat_compile)
    served = Served(
        name=name,
        tokenizer=tokenizer,
        embeddings=embeddings,
        sink=list(sink),
        positions=positions,
        chat=chat,
        prompts=prompts,
        api_key=api_key,
        limits=limits,
    )
    app = build_app(served, engine)
    app.state.encoder, app.state.model, app.state.plans = encoder, model, plans
    return app
