"""A converted encoder as a sentence-transformers model: ``[NosinkTransformer, NosinkPooling(, Normalize)]``.

:class:`NosinkTransformer` tokenizes ``[sink token] + prompt + text`` as :meth:`EncoderFromDecoder.encode`
does and marks each row's text tokens in ``text_mask``; :class:`NosinkPooling` pools over that mask, so
``SentenceTransformer.encode(texts, prompt_name=name)`` equals ``encoder.encode(texts,
instruction=prompts[name])`` (float32, to about 1e-5). The text tokens are found per row from the joint
tokenization, because a prompt tokenized alone (``Pooling(include_prompt=False)``'s ``prompt_length``)
can count a trailing space that the joint tokenization merges into the text.

Needs the ``st`` extra; ``import nosink`` does not import this module.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from pathlib import Path, PureWindowsPath
from typing import Any, ClassVar, Literal

import torch
from sentence_transformers import SentenceTransformer
from sentence_transformers.base.modules import InputModule, Module, Normalize

from nosink.checks import positive_int, printable

from . import batching as _batching
from . import texts as _texts
from .configs import read_json
from .encoder import EncoderFromDecoder
from .mteb_meta import mteb_meta
from .pooling import POOLINGS, Pooling, pool
from .saved import write_encoder_files

__all__ = [
    "NosinkPooling",
    "NosinkTransformer",
    "load_sentence_transformer",
    "mteb_meta",
    "mteb_model",
    "to_sentence_transformer",
]

logger = logging.getLogger(__name__)


def _tokenize_batch(
    encoder: EncoderFromDecoder, texts: Sequence[str], prompt: str | None, max_length: int, padding_side: str
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(input_ids, attention_mask, text_mask)`` for ``[sink] + prompt + text`` rows, in input order.

    Raises:
        ValueError: if the sink token and prompt leave no room for text within ``max_length``.
    """
    tokens = _texts.tokenize(encoder.tokenizer, texts, prompt, sink=encoder.sink_ids(), max_length=max_length)
    _batching.warn_about(tokens, max_length, caller="SentenceTransformer.encode()")
    return _batching.pad(tokens, range(len(texts)), _batching.pad_id(encoder.tokenizer), padding_side)


class NosinkTransformer(InputModule):
    """The sentence-transformers input module around an :class:`EncoderFromDecoder` (sharing its tensors).

    Saved, it is an encoder folder (:meth:`EncoderFromDecoder.save_pretrained`) plus ``nosink_st_config.json``.

    Args:
        encoder: the converted decoder, with its tokenizer.
        max_seq_length: truncate inputs to this many tokens, sink token and prompt included.
        padding_side: ``"right"`` or ``"left"``; the embeddings do not depend on it.

    Raises:
        ValueError: for an encoder without a tokenizer or with a template (sentence-transformers pools the text
            after a prompt; it has no place for a prompt around the text), a bad ``max_seq_length`` or
            ``padding_side``.
    """

    config_file_name = "nosink_st_config.json"
    config_keys: ClassVar[list[str]] = ["max_seq_length", "padding_side"]
    save_in_root = True

    def __init__(
        self, encoder: EncoderFromDecoder, max_seq_length: int = 512, padding_side: Literal["right", "left"] = "right"
    ) -> None:
        super().__init__()
        if encoder.tokenizer is None:
            raise ValueError("the encoder has no tokenizer; sentence-transformers needs one (tokenizer=...)")
        if encoder.template is not None:
            raise ValueError(
                f"the encoder puts each text in the template {encoder.template}, which the sentence-transformers "
                "form cannot: it pools the text after a prompt; load the encoder with template='none', or use "
                "encoder.encode()"
            )
        positive_int(max_seq_length, "max_seq_length")
        if padding_side not in ("right", "left"):
            raise ValueError(f"padding_side must be 'right' or 'left', got {padding_side!r}")
        self.encoder = encoder
        self.max_seq_length = max_seq_length
        self.padding_side = padding_side

    @property
    def tokenizer(self) -> Any:
        """The encoder's tokenizer (what ``SentenceTransformer.tokenizer`` returns)."""
        return self.encoder.tokenizer

    def preprocess(self, inputs: Sequence[Any], prompt: str | None = None, **kwargs: Any) -> dict[str, Any]:
        """Token ids of ``[sink token] + prompt + text`` per text, with the mask of the text tokens.

        Args:
            inputs: the texts of one batch.
            prompt: the prompt sentence-transformers resolved (``prompt=`` or ``prompts[prompt_name]``).
            **kwargs: unused.

        Returns:
            ``input_ids``, ``attention_mask``, ``text_mask`` (bool, the pooled tokens) and, for a
            non-empty batch, ``prompt_length`` (the fewest tokens before the text in any row) for
            sentence-transformers' own ``Pooling``.

        Raises:
            ValueError: for inputs that are not strings, or a prompt that leaves no room for text.
        """
        texts = list(inputs)
        for i, text in enumerate(texts):
            if not isinstance(text, str):
                raise ValueError(f"nosink encoders take texts only; input {i} is a {type(text).__name__}")
        ids, attention_mask, text_mask = _tokenize_batch(
            self.encoder, texts, prompt or None, self.max_seq_length, self.padding_side
        )
        features: dict[str, Any] = {"input_ids": ids, "attention_mask": attention_mask, "text_mask": text_mask}
        starts = attention_mask.sum(-1) - text_mask.sum(-1)  # (B,): the text is each row's last real tokens
        if len(texts):
            if int(starts.min()) != int(starts.max()):
                logger.warning(
                    "the prompt covers %d to %d tokens in this batch (its last token merges into some texts): "
                    "sentence-transformers' Pooling(include_prompt=False) excludes %d; NosinkPooling is exact",
                    int(starts.min()),
                    int(starts.max()),
                    int(starts.min()),
                )
            features["prompt_length"] = int(starts.min())
        return features

    def forward(self, features: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        """Add ``token_embeddings`` ``(B, T, D)`` (after the final norm) to :meth:`preprocess`'s ``features``."""
        out = self.encoder(features["input_ids"], features["attention_mask"])
        features["token_embeddings"] = out.last_hidden_state
        return features

    def get_embedding_dimension(self) -> int:
        """The decoder's hidden size."""
        return int(self.encoder.config.hidden_size)

    def save(self, output_path: str, *args: Any, safe_serialization: bool = True, **kwargs: Any) -> None:
        """Write the encoder folder into the model's root ``output_path``; always safetensors."""
        write_encoder_files(self.encoder, Path(output_path))
        self.save_config(output_path)

    @classmethod
    def load(
        cls,
        model_name_or_path: str,
        subfolder: str = "",
        token: bool | str | None = None,
        cache_folder: str | None = None,
        revision: str | None = None,
        local_files_only: bool = False,
        model_kwargs: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> NosinkTransformer:
        """Rebuild the module from a saved folder or hub repository (sentence-transformers' loading arguments).

        ``model_kwargs``' ``dtype`` (or ``torch_dtype``) and ``attn_implementation`` go to
        :meth:`EncoderFromDecoder.from_pretrained`.

        Raises:
            OSError: as :meth:`EncoderFromDecoder.from_pretrained`, for a missing or damaged folder.
        """
        hub = dict(token=token, cache_folder=cache_folder, revision=revision, local_files_only=local_files_only)
        folder = cls.load_dir_path(model_name_or_path, subfolder=subfolder, **hub)
        config = cls.load_config(model_name_or_path, subfolder=subfolder, **hub)
        options = dict(model_kwargs or {})
        load_kwargs = {}
        if "dtype" in options or "torch_dtype" in options:
            load_kwargs["dtype"] = options.get("dtype", options.get("torch_dtype"))
        if "attn_implementation" in options:
            load_kwargs["attn_implementation"] = options["attn_implementation"]
        encoder = EncoderFromDecoder.from_pretrained(folder, **load_kwargs)
        return cls(encoder, **config)


class NosinkPooling(Module):
    """Pool the text tokens only (no sink token, no prompt), with nosink's :func:`~nosink.models.pool`.

    Args:
        embedding_dimension: the token embeddings' size.
        pooling: ``mean`` (the paper's), ``weighted_mean``, ``last`` or ``first``.

    Raises:
        ValueError: for an unknown pooling.
    """

    config_keys: ClassVar[list[str]] = ["embedding_dimension", "pooling"]

    def __init__(self, embedding_dimension: int, pooling: Pooling = "mean") -> None:
        super().__init__()
        if pooling not in POOLINGS:
            raise ValueError(f"unknown pooling {pooling!r}; expected one of {', '.join(POOLINGS)}")
        self.embedding_dimension = int(embedding_dimension)
        self.pooling = pooling

    def forward(self, features: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        """Add ``sentence_embedding`` ``(B, D)``, pooled over :class:`NosinkTransformer`'s ``text_mask``.

        Raises:
            KeyError: if no ``text_mask`` came with the features (the input module is not nosink's).
        """
        if "text_mask" not in features:
            raise KeyError("NosinkPooling needs the 'text_mask' that NosinkTransformer computes")
        features["sentence_embedding"] = pool(features["token_embeddings"], features["text_mask"], self.pooling)
        return features

    def get_embedding_dimension(self) -> int:
        """The sentence embedding's size (the token embeddings')."""
        return self.embedding_dimension

    def save(self, output_path: str, *args: Any, safe_serialization: bool = True, **kwargs: Any) -> None:
        """Write ``config.json`` into ``output_path`` (this module has no weights)."""
        self.save_config(output_path)


# The modules.json types that load_sentence_transformer() accepts, mapped to classes so that no type string
# is ever imported.
_NOSINK_MODULES: dict[str, type[Module]] = {
    f"{cls.__module__}.{cls.__qualname__}": cls for cls in (NosinkTransformer, NosinkPooling, Normalize)
}


def to_sentence_transformer(
    encoder: EncoderFromDecoder,
    prompts: Mapping[str, str] | None = None,
    *,
    pooling: Pooling = "mean",
    normalize: bool = False,
    default_prompt_name: str | None = None,
    max_seq_length: int = 512,
    padding_side: Literal["right", "left"] = "right",
    similarity_fn_name: Literal["cosine", "dot", "euclidean", "manhattan"] = "cosine",
) -> SentenceTransformer:
    """A ``SentenceTransformer`` that runs ``encoder`` (its tensors, not a copy) and pools like ``encode()``.

    ``model.save(folder)`` writes a folder that :func:`load_sentence_transformer` loads.

    Args:
        encoder: the converted decoder, with its tokenizer.
        prompts: prompt name -> prompt, put verbatim before the text (end it with a space or newline),
            e.g. ``{"query": "Instruct: ...\\nQuery: ", "document": ""}``; saved with the model.
        pooling: ``mean`` (default), ``weighted_mean``, ``last`` or ``first``, over the text tokens.
        normalize: append sentence-transformers' ``Normalize`` module (unit-length embeddings).
        default_prompt_name: the prompt used when ``encode()`` is given none.
        max_seq_length: at most this many tokens per input, sink token and prompt included.
        padding_side: ``"right"`` or ``"left"``; the embeddings do not depend on it.
        similarity_fn_name: what ``model.similarity`` computes.

    Raises:
        ValueError: for an encoder without a tokenizer, an unknown pooling, or an unknown
            ``default_prompt_name``.
    """
    first = NosinkTransformer(encoder, max_seq_length=max_seq_length, padding_side=padding_side)
    modules: list[torch.nn.Module] = [first, NosinkPooling(first.get_embedding_dimension(), pooling)]
    if normalize:
        modules.append(Normalize())
    device = str(next(encoder.parameters()).device)  # stay where the encoder is (no move to a GPU)
    model = SentenceTransformer(
        modules=modules,
        device=device,
        prompts=dict(prompts or {}),
        default_prompt_name=default_prompt_name,
        similarity_fn_name=similarity_fn_name,
    )
    return model


def load_sentence_transformer(
    path: str | Path,
    *,
    device: str | None = None,
    prompts: Mapping[str, str | None] | None = None,
    default_prompt_name: str | None = None,
    similarity_fn_name: Literal["cosine", "dot", "euclidean", "manhattan"] | None = None,
    truncate_dim: int | None = None,
    model_kwargs: Mapping[str, Any] | None = None,
) -> SentenceTransformer:
    """Load a folder saved from :func:`to_sentence_transformer`'s model, running no code from the folder.

    Only the module types nosink writes are accepted, built from the installed packages; every file is
    checked before the weights load. (A plain ``SentenceTransformer(folder)`` needs ``trust_remote_code=True``
    here, and would then run whatever code the folder names.)

    Args:
        path: a local folder with ``modules.json``.
        device: where the model runs (sentence-transformers' default: a GPU if there is one).
        prompts: prompt name -> prompt; these win over the saved prompts of the same name.
        default_prompt_name: the prompt used when ``encode()`` is given none (default: the saved one).
        similarity_fn_name: what ``model.similarity`` computes (default: the saved one, else cosine).
        truncate_dim: truncate sentence embeddings to this size (default: the saved one, else none).
        model_kwargs: ``dtype`` (or ``torch_dtype``) and ``attn_implementation``, as in :meth:`NosinkTransformer.load`.

    Raises:
        OSError: for a missing or unreadable ``modules.json`` or ``config_sentence_transformers.json``,
            encoder files that do not load (see :meth:`EncoderFromDecoder.from_pretrained`), or configs
            that need code of their own (:class:`~nosink.models.loading.RemoteCodeError`).
        ValueError: if ``modules.json`` names another module type, a path outside the folder or another
            order than nosink writes; for a saved ``model_type`` other than ``SentenceTransformer``,
            prompts that are not strings, an unknown ``default_prompt_name`` or a bad ``truncate_dim``.
    """
    folder = Path(path)
    entries = _read_modules_json(folder)
    settings = _read_st_config(folder)

    modules: OrderedDict[str, torch.nn.Module] = OrderedDict()
    module_kwargs: OrderedDict[str, Any] = OrderedDict()
    for entry in entries:  # every entry was checked before any is loaded
        cls = _NOSINK_MODULES[entry["type"]]
        where = dict(subfolder=entry["path"], local_files_only=True)  # the local folder only, never the hub
        if cls is NosinkTransformer:
            module = NosinkTransformer.load(str(folder), model_kwargs=model_kwargs, **where)
        else:
            module = cls.load(str(folder), **where)
        modules[str(entry["name"])] = module
        module_kwargs[str(entry["name"])] = entry.get("kwargs", [])

    # As SentenceTransformer(folder)'s _parse_model_config: a saved prompt fills a name not given (or None).
    merged = dict(prompts or {})
    for name, prompt in (settings.get("prompts") or {}).items():
        if merged.get(name) is None:
            merged[name] = prompt
    for name, prompt in merged.items():
        if not isinstance(name, str) or not isinstance(prompt, str):
            raise ValueError(
                f"prompt {printable(repr(name))} is {printable(repr(prompt)[:200])}: prompts map names to strings"
            )
    if default_prompt_name is None:
        default_prompt_name = settings.get("default_prompt_name")
    saved_similarity = settings.get("similarity_fn_name")
    if similarity_fn_name is None and saved_similarity in SentenceTransformer.SUPPORTED_SIMILARITY_FN_NAMES:
        similarity_fn_name = saved_similarity
    if truncate_dim is None:
        truncate_dim = settings.get("truncate_dim")
    model = SentenceTransformer(
        modules=modules,
        device=device,
        prompts=merged,
        default_prompt_name=default_prompt_name,
        similarity_fn_name=similarity_fn_name,
        truncate_dim=truncate_dim,
    )
    model.module_kwargs = module_kwargs  # as a folder load sets it (modules.json's per-module "kwargs")
    return model


def _read_modules_json(folder: Path) -> list[dict[str, Any]]:
    """``modules.json``'s entries, each checked: a type nosink writes, a name, a relative path inside ``folder``.

    Raises:
        OSError: if the file is missing or not JSON.
        ValueError: for an entry of another type (the type and the file are named), or a bad path.
    """
    file = folder / "modules.json"
    if not file.is_file():
        raise OSError(f"{file} is missing; is {folder} a sentence-transformers folder?")
    entries = read_json(file, "save the model again with model.save(folder)")
    if not isinstance(entries, list) or not entries or not all(isinstance(e, dict) for e in entries):
        raise ValueError(f"{file} is not a list of module entries")
    for i, entry in enumerate(entries):
        kind = entry.get("type")
        if not isinstance(kind, str) or kind not in _NOSINK_MODULES:
            raise ValueError(
                f"{file} names module type {kind!r} (entry {i}), which load_sentence_transformer() does not load: "
                f"it loads only the module types nosink writes ({', '.join(sorted(_NOSINK_MODULES))}) and runs no "
                "code from the folder. If you trust the folder and all the code it names, load it with "
                "SentenceTransformer(folder, trust_remote_code=True)"
            )
        sub = entry.get("path")
        if not isinstance(sub, str) or "name" not in entry:
            raise ValueError(f"{file}: entry {i} ({kind}) has no name or no path")
        where = PureWindowsPath(sub)
        if where.anchor or ".." in where.parts or "\0" in sub:
            raise ValueError(f"{file}: entry {i} ({kind}) has path {sub!r}; expected a relative path inside the folder")
    # Another order would load, then fail at encode().
    kinds = [_NOSINK_MODULES[e["type"]] for e in entries]
    if kinds not in ([NosinkTransformer, NosinkPooling], [NosinkTransformer, NosinkPooling, Normalize]):
        names = ", ".join(k.__name__ for k in kinds)
        raise ValueError(
            f"{file} lists the modules {names}; a nosink model is NosinkTransformer, NosinkPooling and "
            "optionally Normalize, in that order: save the model again with model.save(folder)"
        )
    return entries


def _read_st_config(folder: Path) -> dict[str, Any]:
    """``config_sentence_transformers.json`` (``{}`` when absent), with a ``model_type`` nosink writes.

    Raises:
        OSError: if the file is there but not JSON.
        ValueError: if it names another ``model_type`` than ``SentenceTransformer``.
    """
    file = folder / "config_sentence_transformers.json"
    if not file.is_file():
        return {}
    settings = read_json(file, "save the model again with model.save(folder)")
    if not isinstance(settings, dict):
        raise OSError(f"{file} is not a JSON object")
    kind = settings.get("model_type", "SentenceTransformer")
    if kind != "SentenceTransformer":
        raise ValueError(f"{file} names model_type {kind!r}; nosink writes SentenceTransformer folders only")
    prompts = settings.get("prompts")
    if prompts is not None and not (isinstance(prompts, dict) and all(isinstance(v, str) for v in prompts.values())):
        raise ValueError(f"{file}: 'prompts' must map prompt names to strings, got {printable(repr(prompts)[:200])}")
    default = settings.get("default_prompt_name")
    if default is not None and not (isinstance(default, str) and default in (prompts or {})):
        raise ValueError(
            f"{file}: 'default_prompt_name' {printable(repr(default)[:200])} is not one of its prompts "
            f"({', '.join(map(repr, prompts or {})) or 'none'})"
        )
    truncate = settings.get("truncate_dim")
    if truncate is not None:
        try:
            positive_int(truncate, "'truncate_dim'")
        except ValueError as err:
            raise ValueError(f"{file}: {err}") from None
    return settings


def mteb_model(
    model: SentenceTransformer,
    prompts: Mapping[str, str] | None = None,
    *,
    name: str | None = None,
    revision: str | None = None,
    languages: Sequence[str] | None = None,
    experiment_kwargs: Mapping[str, Any] | None = None,
) -> Any:
    """mteb's sentence-transformers wrapper around ``model``, with a ModelMeta that names the nosink encoder.

    ``mteb.evaluate(mteb_model(model, prompts), tasks)`` files the results under ``name`` and
    ``revision``, with the spec and pooling in ``experiment_kwargs`` (see :func:`mteb_meta`).

    Args:
        model: a model from :func:`to_sentence_transformer` or :func:`load_sentence_transformer`.
        prompts: mteb's prompt keys (task name, ``"<task>-query"``, ``"<task>-document"``, task type,
            ``"query"``/``"document"``) -> prompt, replacing the model's; ``""`` means none, so
            ``{"SciFact": p, "SciFact-document": ""}`` puts ``p`` on SciFact's queries only.
        name: the mteb model name (see :func:`mteb_meta`).
        revision: the recorded revision (see :func:`mteb_meta`).
        languages: ISO 639-3 + script codes (``["eng-Latn"]``); unknown by default.
        experiment_kwargs: more entries for the ModelMeta's ``experiment_kwargs`` (e.g. ``limit``).

    Returns:
        a ``mteb.models.SentenceTransformerEncoderWrapper`` whose ``mteb_model_meta`` is set.

    Raises:
        ValueError: if ``model`` does not start with a :class:`NosinkTransformer`.
    """
    from mteb.models import SentenceTransformerEncoderWrapper

    first = model[0]
    if not isinstance(first, NosinkTransformer):
        raise ValueError(f"mteb_model() takes a nosink SentenceTransformer; its first module is {type(first).__name__}")
    if prompts is not None:
        model.prompts = dict(prompts)  # what mteb's wrapper would do, with a warning, when given model_prompts
    wrapper = SentenceTransformerEncoderWrapper(model)
    pooling = next((m.pooling for m in model if isinstance(m, NosinkPooling)), type(model[1]).__name__)
    wrapper.mteb_model_meta = mteb_meta(
        first.encoder,
        name=name,
        revision=revision,
        languages=languages,
        max_tokens=first.max_seq_length,
        use_instructions=bool(wrapper.model_prompts),
        framework=("Sentence Transformers", "PyTorch"),
        experiment_kwargs={"pooling": pooling, **dict(experiment_kwargs or {})},
    )
    return wrapper
