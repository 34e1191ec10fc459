"""mteb's ``ModelMeta`` for a nosink encoder, built in one place for both of nosink's mteb models.

mteb files results by ``ModelMeta``, so :func:`nosink.models.st.mteb_model` and
:class:`nosink.evals.mteb_model.NosinkMTEBEncoder` must describe an encoder the same way. Apart from
:mod:`nosink.models.st` so as not to need sentence-transformers; mteb is imported only when called.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mteb.models.model_meta import ModelMeta

    from .encoder import EncoderFromDecoder

__all__ = ["default_model_name", "mteb_meta"]


def default_model_name(encoder: EncoderFromDecoder) -> str:
    """``nosink/`` and the last part of the encoder's path or hub id (else its decoder's model type).

    Args:
        encoder: the encoder evaluated.
    """
    base = encoder.name_or_path.rstrip("/")
    return f"nosink/{Path(base).name if base else getattr(encoder.config, 'model_type', 'decoder')}"


def mteb_meta(
    encoder: EncoderFromDecoder,
    *,
    name: str | None = None,
    revision: str | None = None,
    languages: Sequence[str] | None = None,
    max_tokens: int = 512,
    use_instructions: bool = True,
    framework: Sequence[str] = ("PyTorch",),
    experiment_kwargs: Mapping[str, Any] | None = None,
) -> ModelMeta:
    """mteb's ``ModelMeta`` for a nosink encoder: its name, revision, size, and the spec.

    Args:
        encoder: the encoder evaluated.
        name: the mteb model name; :func:`default_model_name` by default.
        revision: the recorded revision; ``encoder.revision`` by default, else "no_revision_available".
        languages: ISO 639-3 + script codes (``["eng-Latn"]``); unknown (``None``) by default.
        max_tokens: at most this many tokens per input.
        use_instructions: whether the model is run with task instructions.
        framework: mteb's framework names.
        experiment_kwargs: what sets this run apart (mteb files results by it); its ``spec``, if any,
            replaces the encoder's.

    Returns:
        a ``mteb.models.model_meta.ModelMeta``; the original model's hub id is its ``adapted_from``.

    Raises:
        pydantic.ValidationError: for languages or names mteb does not accept.
    """
    from mteb.models.model_meta import ModelMeta

    base = encoder.name_or_path.rstrip("/")
    return ModelMeta(
        loader=None,
        name=name or default_model_name(encoder),
        revision=revision or encoder.revision or "no_revision_available",
        release_date=None,
        languages=list(languages) if languages is not None else None,
        n_parameters=sum(p.numel() for p in encoder.parameters()),
        memory_usage_mb=None,
        max_tokens=max_tokens,
        embed_dim=int(encoder.config.hidden_size),
        license=None,
        open_weights=True,
        public_training_code=None,
        public_training_data=None,
        framework=list(framework),
        similarity_fn_name="cosine",
        use_instructions=use_instructions,
        training_datasets=None,
        adapted_from=base if base and not Path(base).exists() else None,  # a hub id, not a local folder
        experiment_kwargs={"spec": str(encoder.spec), **dict(experiment_kwargs or {})},
    )
