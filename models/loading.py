"""The one module that calls transformers' ``Auto*`` classes: configs, weights and tokenizers, checked.

No loader runs code from a model folder or hub repository (:class:`RemoteCodeError`). Paths may start
with ``~``. A name that looks like a path (``./x``, ``/x``, ``~/x``, ``a/b/c``) is a local folder and must
exist; anything else that is not an existing folder is a hub model id.
"""

from __future__ import annotations

import logging
import os
import pickle
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from nosink.checks import printable

from .configs import REPAIR, check_config, check_config_json, check_dtype, read_json
from .saved import interrupted_save

__all__ = ["RemoteCodeError", "load_config", "load_model", "load_stock", "load_tokenizer", "local_folder"]

logger = logging.getLogger(__name__)


def local_folder(name_or_path: str | os.PathLike[str]) -> Path | None:
    """The local folder ``name_or_path`` names (``~`` expanded), or ``None`` for a hub model id.

    A :class:`~pathlib.Path` is always local; a string is local if it names an existing folder or looks
    like a path (starts with ``.``, ``/`` or ``~``, or has more than one ``/``).

    Raises:
        FileNotFoundError: if a local name has no folder.
        NotADirectoryError: if it names a file.
    """
    text = os.fspath(name_or_path)
    path = Path(os.path.expanduser(text))
    if path.is_dir():
        return path
    looks_local = text.startswith((".", "/", "~")) or text.count("/") > 1 or (os.sep != "/" and os.sep in text)
    if not looks_local and isinstance(name_or_path, str):
        return None  # a hub id (a stray file of that name does not hide it, as in transformers)
    if path.exists():
        raise NotADirectoryError(f"{printable(text)} is a file, not a model folder")
    raise FileNotFoundError(f"no model folder at {printable(text)}: the folder does not exist{interrupted_save(path)}")


def load_config(name_or_path: str | os.PathLike[str], **hf_kwargs: Any) -> Any:
    """The model's transformers config (cheap: no weights), checked (:func:`~nosink.models.configs.check_config`).

    Keyword arguments other than ``revision``, ``gguf_file``, ``cache_dir``, ``token``, ``local_files_only`` and
    ``subfolder`` are ignored; transformers always gets ``trust_remote_code=False``.

    Raises:
        OSError: if there is no such local folder or hub model (saying which of the two the name was read as),
            a local folder has no ``config.json`` (and no ``gguf_file`` is given), or its ``config.json`` is
            not a JSON object or holds a value transformers cannot build a model from (naming the field);
            :class:`RemoteCodeError` if the model needs code of its own.
        ValueError: for ``trust_remote_code=True``.
    """
    from huggingface_hub.errors import StrictDataclassError
    from transformers import AutoConfig

    folder = local_folder(name_or_path)
    source = str(folder) if folder is not None else os.fspath(name_or_path)
    file = printable(source)
    if folder is not None:
        where = folder / hf_kwargs["subfolder"] if hf_kwargs.get("subfolder") else folder
        file = printable(str(where / "config.json"))
        if not hf_kwargs.get("gguf_file"):
            check_config_json(where)
    kwargs = _keep(hf_kwargs, _CONFIG_KWARGS)
    try:
        with _no_remote_code(source):
            config = AutoConfig.from_pretrained(source, **kwargs)
    except RemoteCodeError:
        raise
    except (OSError, ValueError) as err:
        if folder is not None:  # transformers' ValueError of a local config: no model_type, an unknown one, ...
            if isinstance(err, OSError):
                raise
            raise OSError(f"{file} does not load: {printable(str(err))}") from None
        # ValueError: huggingface_hub's check of the id's form
        raise OSError(
            f"{file} is not a local folder, and as a hub model id it could not be loaded: "
            f"{printable(' '.join(str(err).split()))}{interrupted_save(Path(os.path.expanduser(source)))}"
        ) from None
    except (StrictDataclassError, KeyError, AttributeError, TypeError, ArithmeticError, AssertionError) as err:
        # a field of a bad type or value (a count of 0 divides by zero in transformers' own checks)
        raise OSError(f"{file} does not load: {_reason(err)}; {REPAIR}") from None
    check_config(config, file)
    return config


def _reason(err: BaseException) -> str:
    # An exception as a message: its text (for KeyError, the key), or its type's name when it has no text.
    text = str(err.args[0]) if isinstance(err, KeyError) and err.args else str(err)
    text = " ".join(text.split())  # strict dataclasses' messages run over several indented lines
    return printable(f"{type(err).__name__}: {text}" if text else type(err).__name__)


# Keys a bare decoder does not use when loaded from a checkpoint with a head.
_HEAD_KEYS = ("lm_head.", "score.", "classifier.")


def load_model(
    name_or_path: str | os.PathLike[str],
    *,
    dtype: torch.dtype | str | None,
    attn_implementation: str,
    saved: bool,
    head: bool = False,
    **hf_kwargs: Any,
) -> torch.nn.Module:
    """The bare decoder (or with ``head``, the causal LM), refusing weights that do not match its config.

    transformers would only warn about missing, unexpected or mis-shaped weights; for an encoder that is
    silently wrong, so they are errors here.

    Args:
        name_or_path: hub id or folder.
        dtype: as for :func:`check_dtype`.
        attn_implementation: passed to transformers.
        saved: the folder is a saved encoder (no head weights are expected in it).
        head: load the causal LM with its LM head (``AutoModelForCausalLM``), for generation.
        **hf_kwargs: passed to ``AutoModel.from_pretrained`` (``AutoModelForCausalLM`` with ``head``).

    Raises:
        OSError: for missing, unexpected, mis-shaped, truncated or unloadable weights, naming the source.
        ValueError: for an unknown dtype name.
    """
    from safetensors import SafetensorError
    from transformers import AutoModel, AutoModelForCausalLM

    source = _source(name_or_path)
    where = printable(source)
    auto = AutoModelForCausalLM if head else AutoModel
    dtype, kwargs = check_dtype(dtype), _keep(hf_kwargs)
    try:
        with _no_remote_code(source):
            model, info = auto.from_pretrained(
                source, dtype=dtype, attn_implementation=attn_implementation, output_loading_info=True, **kwargs
            )
    except RemoteCodeError:
        raise
    except SafetensorError as err:
        problem = printable(str(err))
        raise OSError(f"weights in {where} are corrupted or truncated ({problem}); re-download them") from None
    except pickle.UnpicklingError:
        raise OSError(
            f"weights in {where} are a pickle file (.bin) that torch refuses to load safely (it would run code "
            "from the file); use a checkpoint with safetensors weights, or convert a trusted one"
        ) from None
    except RuntimeError as err:  # transformers' size-mismatch error
        raise OSError(f"weights in {where} do not match the model's config: {printable(str(err))}") from None
    except (KeyError, AttributeError, TypeError, ValueError, IndexError, ArithmeticError, AssertionError) as err:
        # A config value that the model's constructor cannot build from (what check_config does not know).
        raise OSError(
            f"the model in {where} does not build from its config.json and the arguments given ({_reason(err)}); "
            f"{REPAIR}"
        ) from None
    unexpected = [k for k in info.get("unexpected_keys", ()) if saved or not k.startswith(_HEAD_KEYS)]
    problems = {"missing_keys": info.get("missing_keys"), "mismatched_keys": info.get("mismatched_keys")}
    problems = {k: v for k, v in problems.items() if v}
    if unexpected:
        problems["unexpected_keys"] = unexpected
    if head and list(problems) == ["missing_keys"] and all(k.startswith("lm_head.") for k in problems["missing_keys"]):
        raise OSError(
            f"{where} has no LM head (a bare decoder, or an encoder saved by nosink): load it without the head "
            "for embeddings only, or give the chat model it came from"
        )
    if problems:
        # transformers would initialise or drop these and carry on: for an encoder that is silently wrong.
        raise OSError(f"weights in {where} do not match the model's config: {problems}")
    return model.eval()


# Files whose presence in a local folder says that it has a tokenizer, which must then load.
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json", "vocab.txt")


def load_tokenizer(name_or_path: str | os.PathLike[str], **hf_kwargs: Any) -> Any:
    """The tokenizer saved with the model, or ``None`` (logged) when there is none.

    Raises:
        OSError: if a local folder has tokenizer files that do not load (truncated, not JSON, ...).
    """
    from transformers import AutoTokenizer

    folder = local_folder(name_or_path)
    source = str(folder) if folder is not None else os.fspath(name_or_path)
    present = [name for name in _TOKENIZER_FILES if folder is not None and (folder / name).is_file()]
    kwargs = _keep(hf_kwargs, _CONFIG_KWARGS)
    try:
        with _no_remote_code(source):
            return AutoTokenizer.from_pretrained(source, **kwargs)
    except RemoteCodeError:
        raise
    except Exception as err:  # the tokenizers library raises plain Exception for a damaged tokenizer.json
        if present:
            raise OSError(
                f"the tokenizer in {printable(source)} ({', '.join(present)}) does not load: "
                f"{printable(str(err))}; re-save or re-download it"
            ) from None
        if not isinstance(err, (OSError, ValueError)):
            raise
        logger.warning("no tokenizer loaded from %s (%s); encode() will need one", printable(source), err)
        return None


def load_stock(name_or_path: str | os.PathLike[str], **hf_kwargs: Any) -> tuple[torch.nn.Module, Any]:
    """A model (``AutoModel``, in eval mode) and its tokenizer as transformers loads them, without nosink's checks.

    For models that are not converted (the encoder baselines) and for GGUF files on their way to safetensors.

    Raises:
        OSError: if there is no such folder or model.
    """
    from transformers import AutoModel, AutoTokenizer

    source = _source(name_or_path)
    with _no_remote_code(source):
        model = AutoModel.from_pretrained(source, **_keep(hf_kwargs)).eval()
        tokenizer = AutoTokenizer.from_pretrained(source, **_keep(hf_kwargs, _CONFIG_KWARGS))
    return model, tokenizer


class RemoteCodeError(OSError):
    """A model folder or hub repository that needs code of its own to load: nosink never runs such code."""


# Where a folder asks transformers to import its own code (``auto_map``), file by file.
_CODE_FILES = ("config.json", "tokenizer_config.json", "processor_config.json", "preprocessor_config.json")


@contextmanager
def _no_remote_code(source: str) -> Iterator[None]:
    # transformers' loaders get trust_remote_code=False (see _keep): asked for code, they raise a ValueError
    # ("... contains custom code which must be executed ...") instead of prompting on a terminal (and running
    # the code on "y"). That ValueError becomes a RemoteCodeError.
    try:
        yield
    except ValueError as err:
        if "custom code" not in str(err):
            raise
        folder = Path(os.path.expanduser(source))
        asking = [n for n in _CODE_FILES if folder.is_dir() and "auto_map" in _json_keys(folder / n)]
        where = f" (auto_map in {', '.join(asking)})" if asking else ""
        raise RemoteCodeError(
            f"{printable(source)} needs code of its own to load{where}: nosink never runs code from a model folder "
            "or hub repository; use a model whose architecture and tokenizer transformers ships"
        ) from None


def _json_keys(file: Path) -> set[str]:
    try:
        value = read_json(file, "")
    except OSError:  # missing, unreadable or not JSON: it asks for nothing
        return set()
    return set(value) if isinstance(value, dict) else set()


_CONFIG_KWARGS = ("revision", "gguf_file", "cache_dir", "token", "local_files_only", "subfolder")


def _source(name_or_path: str | os.PathLike[str]) -> str:
    # What transformers is given: the local folder, ~ expanded, or the hub id as written.
    folder = local_folder(name_or_path)
    return str(folder) if folder is not None else os.fspath(name_or_path)


def _keep(kwargs: dict[str, Any], names: tuple[str, ...] | None = None) -> dict[str, Any]:
    # What a transformers loader is given: the keyword arguments in `names` (all if None), and never leave to run
    # code from the model's folder or repository.
    if kwargs.get("trust_remote_code"):
        raise ValueError(
            "trust_remote_code=True: nosink never runs code from a model folder or hub repository; use a model "
            "whose architecture and tokenizer transformers ships"
        )
    kept = {k: v for k, v in kwargs.items() if names is None or k in names}
    kept["trust_remote_code"] = False
    return kept
