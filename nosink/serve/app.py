"""Assembling a server from a model: the encoder on the model's own tensors, the engine, the routes.

``create_app(model, tokenizer, spec)`` checks what it is given, builds the encoder with
:meth:`EncoderFromDecoder.from_model` (its parameters are the LM's tensors) and an :class:`Engine` that runs
both, and serves them with :func:`~nosink.serve.routes.build_app`.
"""

from pathlib import Path
from typing import Any

import torch

from nosink.checks import printable
from nosink.layerspec import Spec
from nosink.models import EncoderFromDecoder
from nosink.serve.engine import Engine
from nosink.serve.limits import Limits
from nosink.serve.loading import check_api_key
from nosink.serve.routes import build_app
from nosink.serve.served import Served


def _model_id(name_or_path: str) -> str:
    """The model id a server gives by default: the last part of the hub id or folder, ``"model"`` if none."""
    path = Path(name_or_path)
    if name_or_path and path.is_dir():
        path = path.resolve()  # "." is the folder's own name
    return path.name or "model"


def create_app(
    model: torch.nn.Module,
    tokenizer: Any,
    spec: str | Spec,
    *,
    name: str | None = None,
    chat: bool = True,
    prompts: dict[str, str] | None = None,
    api_key: str | None = None,
    limits: Limits | None = None,
    sink_token: str = "auto",
) -> Any:
    """An OpenAI-compatible FastAPI app serving chat and embeddings from ``model``'s one set of weights.

    ``app.state.encoder`` (``EncoderFromDecoder.from_model(model, spec, tokenizer)``) and ``app.state.model``
    are two views of the same tensors.

    Args:
        model: a causal LM (with its head); a bare decoder serves embeddings only (``chat=False``).
        tokenizer: the model's tokenizer; chat needs its chat template.
        spec: the layer spec the embeddings use, e.g. ``"F* | M0B*10"``.
        name: the model id clients send; by default the last part of the model's hub id or folder, else ``"model"``.
        chat: serve ``/v1/chat/completions``.
        prompts: named instructions for embeddings (``{"query": "Instruct: ...\\nQuery: "}``), used only when
            a request names one in ``prompt_name``.
        api_key: if given, every ``/v1`` request needs ``Authorization: Bearer <api_key>``.
        limits: request limits and batching (see :class:`Limits`).
        sink_token: as for :class:`EncoderFromDecoder`.

    Raises:
        ImportError: if FastAPI is not installed (``pip install "nosink[serve]"``).
        ValueError: for a missing tokenizer, chat without an LM head or a chat template, an empty
            ``api_key``, or prompts that are not names mapped to strings.
        SpecError: if the spec does not fit the model.
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
    encoder = EncoderFromDecoder.from_model(model, spec, tokenizer, sink_token=sink_token)
    sink = encoder.sink_ids()
    name = name or _model_id(encoder.name_or_path)
    positions = getattr(encoder.config, "max_position_embeddings", None)
    engine = Engine(encoder, model if chat else None, tokenizer, limits)
    served = Served(
        name=name,
        tokenizer=tokenizer,
        spec=str(encoder.spec),
        dims=encoder.config.hidden_size,
        sink=list(sink),
        positions=positions,
        chat=chat,
        prompts=prompts,
        api_key=api_key,
        limits=limits,
    )
    app = build_app(served, engine)
    app.state.encoder, app.state.model = encoder, model
    return app
