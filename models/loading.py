"""The one room where nosink meets model files: transformers' loaders and the saved-encoder folder.

Everything that reads a model, config or tokenizer goes through here (no other module calls
transformers' ``Auto*`` classes), and so does everything that knows the saved-encoder layout: a plain
transformers folder (``config.json``, safetensors weights, tokenizer files) with a ``nosink.json``
beside it. Folders are written whole or not at all: :func:`replacing` builds the new folder as a
hidden sibling and swaps it in, so a reader never sees old and new files mixed.

A save killed part-way (``kill -9``, power loss) can leave hidden ``.NAME.tmp-*`` siblings behind: the
next save of the same folder removes them (see :func:`replacing`), and loading a missing folder says
when such a sibling holds the previous encoder.

Paths may start with ``~``. A name that looks like a path (``./x``, ``/x``, ``~/x``, ``a/b/c``) is a
local folder and must exist; anything else that is not an existing folder is a hub model id.
"""

from __future__ import annotations

import json
import logging
import os
import pickle
import re
import shutil
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from nosink.checks import printable

from .families import make_serializable

if TYPE_CHECKING:
    from .encoder import EncoderFromDecoder

__all__ = [
    "FORMAT",
    "SAVED_FILE",
    "check_dtype",
    "check_config",
    "check_saved",
    "check_sink_token",
    "check_weights",
    "interrupted_save",
    "load_config",
    "load_model",
    "load_stock",
    "load_tokenizer",
    "local_folder",
    "RemoteCodeError",
    "read_json",
    "read_saved",
    "replacing",
    "save_encoder",
    "write_encoder_files",
]

logger = logging.getLogger(__name__)

SAVED_FILE = "nosink.json"
FORMAT = 1  # version of the nosink.json layout

# --------------------------------------------------------------------------- where a name points


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


def interrupted_save(path: Path) -> str:
    """A sentence for the error about a missing ``path``: where an interrupted save left the previous encoder.

    A save killed between its two renames (see :func:`replacing`) leaves ``path`` absent and the previous
    encoder whole in a ``.NAME.tmp-old-*`` sibling. Returns ``""`` when there is no such sibling.
    """
    path = Path(os.path.abspath(path))
    if not path.name:
        return ""
    pattern = _sibling_pattern(path.name, old=True)
    try:
        found = [p for p in path.parent.iterdir() if pattern.fullmatch(p.name) and (p / SAVED_FILE).is_file()]
    except OSError:
        return ""
    if not found:
        return ""
    newest = max(found, key=lambda p: p.stat().st_mtime)
    more = f" (and {len(found) - 1} older such folder(s))" if len(found) > 1 else ""
    return (
        f"; but an interrupted save left the previous encoder in {printable(str(newest))}{more}: rename that "
        f"folder to {printable(path.name)} to restore it"
    )


# --------------------------------------------------------------------------- the saved-encoder folder


def check_sink_token(value: Any) -> str:
    """``value`` if it is a valid ``sink_token``: ``"auto"``, ``"none"`` or a token (a non-empty string).

    Raises:
        ValueError: for anything else, quoting it.
    """
    if not isinstance(value, str) or not value:
        raise ValueError(f"sink_token must be 'auto', 'none' or a token string, got {printable(repr(value))}")
    return value


def read_saved(name_or_path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The ``nosink.json`` of a folder written by ``save_pretrained``, or ``None`` for anything else.

    Raises:
        OSError: if the file is not valid JSON, lacks the spec, has a bad ``sink_token``, or has a newer
            format than this version reads.
    """
    file = Path(os.path.expanduser(os.fspath(name_or_path))) / SAVED_FILE
    if not file.is_file():
        return None
    where = printable(str(file))
    meta = read_json(file, "re-save the encoder with save_pretrained()")
    if not isinstance(meta, dict) or not isinstance(meta.get("spec"), str):
        raise OSError(f"{where} has no 'spec' string; re-save the encoder with save_pretrained()")
    if meta.get("format") != FORMAT:
        raise OSError(
            f"{where} has format {printable(repr(meta.get('format')))}; this version of nosink reads format "
            f"{FORMAT}: upgrade nosink or re-save the encoder"
        )
    if "sink_token" in meta:
        try:
            check_sink_token(meta["sink_token"])
        except ValueError as err:
            raise OSError(f"{where}: {err}") from None
    return meta


def read_json(file: Path, fix: str) -> Any:
    """The JSON value in ``file``, a file of a model folder; ``fix`` ends the error message (what to do).

    Raises:
        OSError: naming the file, if it cannot be read, is not UTF-8, is not JSON or is nested too deeply to read.
    """
    where = printable(str(file))
    try:
        text = file.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise OSError(f"{where} is not UTF-8 text ({err.reason} at byte {err.start}); {fix}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise OSError(f"{where} is not valid JSON ({printable(str(err))}); {fix}") from None
    except RecursionError:
        raise OSError(f"{where} is nested too deeply to read as JSON; {fix}") from None


def check_saved(path: Path, saved: dict[str, Any], config: Any) -> None:
    """Check a saved folder's metadata against its config, and its weight files' integrity.

    Raises:
        OSError: for a depth or model type that differs from config.json, or missing or damaged weight files.
    """
    for key, have in (("model_type", config.model_type), ("num_hidden_layers", config.num_hidden_layers)):
        if saved.get(key) not in (None, have):
            raise OSError(
                f"{printable(str(path / SAVED_FILE))} says {key} {printable(repr(saved[key]))} "
                f"but config.json has {have!r}"
            )
    if not any(path.glob("*.safetensors")):
        raise OSError(
            f"{printable(str(path))} holds no *.safetensors weights; re-save the encoder with save_pretrained()"
        )
    check_weights(path)


def check_weights(folder: Path) -> None:
    """Open every tensor of every ``*.safetensors`` file in ``folder``, so damage is an error before loading.

    Raises:
        OSError: naming the first truncated or unreadable file.
    """
    from safetensors import SafetensorError, safe_open

    for file in sorted(folder.glob("*.safetensors")):
        try:
            with safe_open(file, framework="pt") as f:
                for key in f.keys():  # reading each tensor catches truncation, not just a bad header
                    f.get_slice(key)
        except (SafetensorError, OSError, ValueError) as err:
            raise OSError(
                f"{printable(str(file))} is corrupted or truncated ({printable(str(err))}); re-save or re-download it"
            ) from None


def save_encoder(encoder: EncoderFromDecoder, directory: str | os.PathLike[str]) -> Path:
    """Write the encoder as a folder: ``nosink.json``, the decoder's config and safetensors weights, the tokenizer.

    The folder is replaced whole (see :func:`replacing`): afterwards it holds exactly this encoder's
    files, and a failure part-way leaves the previous folder as it was. Returns the folder written
    (absolute: ``~``, ``.``, ``..`` and links resolved).

    Raises:
        FileExistsError: if ``directory`` is a file or lies below one, a non-empty folder that is not a saved
            encoder (no ``nosink.json``): nosink never deletes a folder it did not write; or the current working
            directory or a folder above it (replacing it would leave the process in a deleted folder).
        FileNotFoundError: if ``directory``, or a folder on its path, is a link to nothing (the save would
            create folders where the link points).
    """
    given = printable(os.fspath(directory))
    path = Path(os.path.abspath(os.path.expanduser(os.fspath(directory))))
    for link in (path, *path.parents):
        if link.is_symlink() and not link.exists():  # resolve() would follow it, and mkdir create where it points
            raise FileNotFoundError(
                f"refusing to save to {given}: {printable(str(link))} is a link to {printable(os.readlink(link))}, "
                "which does not exist; create that folder, or remove the link"
            )
    directory = path.resolve()  # a link: replace what it points to
    above = next((p for p in directory.parents if p.exists()), None)
    if above is not None and not above.is_dir():
        raise FileExistsError(
            f"refusing to save to {given}: {printable(str(above))} is a file, not a folder; save under a folder"
        )
    if not directory.name:
        raise FileExistsError(f"{given} is the filesystem root: save the encoder to a folder")
    try:
        cwd = Path.cwd().resolve()
    except OSError:
        cwd = None
    if cwd is not None and (cwd == directory or directory in cwd.parents):
        raise FileExistsError(
            f"refusing to save to {given} ({printable(str(directory))}): it is the current working directory or "
            "holds it, and replacing it would leave this process in a deleted folder; save from another "
            "directory, or to another folder"
        )
    if directory.exists():
        if not directory.is_dir():
            raise FileExistsError(f"{printable(str(directory))} is a file: save the encoder to a folder")
        if not (directory / SAVED_FILE).is_file() and any(directory.iterdir()):
            raise FileExistsError(
                f"{printable(str(directory))} is not empty and holds no {SAVED_FILE}: refusing to replace a folder "
                "that is not a saved encoder; save to a new or empty folder"
            )
    with replacing(directory) as partial:
        write_encoder_files(encoder, partial)
    return directory


def write_encoder_files(encoder: EncoderFromDecoder, folder: Path) -> None:
    """Write the encoder's files into ``folder`` as they are, beside whatever else it holds.

    The building block of :func:`save_encoder` (which writes into a fresh sibling and swaps it in);
    on its own it suits a folder that another library owns and writes to as well, such as a
    sentence-transformers model's root folder.
    """
    decoder = encoder.decoder
    make_serializable(decoder)
    meta = {
        "format": FORMAT,
        "spec": str(encoder.spec),
        "sink_token": encoder.sink_token,
        "model_type": decoder.config.model_type,
        "num_hidden_layers": encoder.parts.depth,
    }
    decoder.save_pretrained(folder, safe_serialization=True)
    if encoder.tokenizer is not None:
        encoder.tokenizer.save_pretrained(folder)
    (folder / SAVED_FILE).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")


@contextmanager
def replacing(target: Path) -> Iterator[Path]:
    """Build a folder that replaces ``target`` whole: yields an empty hidden sibling to fill.

    When the block ends without error the sibling takes ``target``'s place: the old folder is moved
    aside (``.NAME.tmp-old-*``), the new one renamed in, the old one removed (all on one filesystem, so
    each move is a rename). If the block or the first rename fails, the sibling is removed and ``target``
    is as it was. Between the two renames ``target`` is briefly absent, never a mix of old and new files;
    a process killed in that instant leaves the old encoder whole in ``.NAME.tmp-old-*``, and loading
    ``target`` then says so.

    A process killed part-way (``kill -9``: no cleanup runs) leaves its ``.NAME.tmp-*`` sibling behind.
    Each save removes such leftovers of earlier saves of the same ``target``, and logs each one: partial
    copies before it writes (they may hold gigabytes), previous encoders left by a kill between the renames
    only once the new folder is in place (until then they are the only copy). A sibling is removed only if

    - its name is exactly ``.NAME.tmp-`` or ``.NAME.tmp-old-`` and 12 hex digits (what this function makes);
    - it was made (or renamed) before this save began (its ``st_ctime``);
    - no live save holds it: each save holds an exclusive ``flock`` on its sibling while it writes,
      which the kernel releases when the process dies, however it dies (unlike a pid, which can be
      reused or belong to another container); a cleaner that cannot take the lock leaves the sibling.

    Where locks are not available (no ``fcntl``, a filesystem that refuses them) nothing is removed and a
    warning names the leftovers.
    """
    target = Path(os.path.abspath(target))
    start = time.time()
    target.parent.mkdir(parents=True, exist_ok=True)
    _remove_leftovers(target, start, old=False)
    partial, lock = _claim(target)
    try:
        try:
            yield partial
            _swap_in(partial, target, lock)
        except BaseException:
            shutil.rmtree(partial, ignore_errors=True)
            raise
    finally:
        if lock is not None:
            os.close(lock)
    _remove_leftovers(target, start, old=True)


_HEX = 12  # hex digits of uuid4 in a sibling's name


def _sibling_pattern(name: str, *, old: bool) -> re.Pattern[str]:
    # The exact names replacing() gives its siblings: .NAME.tmp-<12 hex> and .NAME.tmp-old-<12 hex>.
    return re.compile(rf"\.{re.escape(name)}\.tmp-{'old-' if old else ''}[0-9a-f]{{{_HEX}}}")


def _claim(target: Path) -> tuple[Path, int | None]:
    # A new empty sibling, locked (the lock is None where flock is unavailable). A cleaner may lock a
    # sibling between its mkdir and our flock; so lock, then check the name still holds the locked folder.
    for _ in range(100):
        partial = target.with_name(f".{target.name}.tmp-{uuid.uuid4().hex[:_HEX]}")
        partial.mkdir()  # not tempfile.mkdtemp: its 0700 mode would become the saved folder's
        lock = _lock(partial)
        if lock is None or lock >= 0:
            return partial, lock
        # else a cleaner took it between mkdir and flock (and removes it): make another
    raise OSError(f"could not take a lock on a new folder beside {printable(str(target))}")


def _lock(folder: Path) -> int | None:
    """An open descriptor of ``folder`` holding an exclusive flock on it (release: close it).

    ``-1`` if another process holds the lock or ``folder`` was replaced or removed meanwhile; ``None``
    if locks are not available here.
    """
    try:
        import fcntl
    except ImportError:
        return None
    try:
        fd = os.open(folder, os.O_RDONLY)
    except FileNotFoundError:
        return -1
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        if not os.path.samestat(os.fstat(fd), os.stat(folder)):
            raise FileNotFoundError(folder)
    except (BlockingIOError, FileNotFoundError):
        os.close(fd)
        return -1
    except OSError:
        os.close(fd)
        return None
    return fd


def _remove_leftovers(target: Path, start: float, *, old: bool) -> None:
    # Remove the siblings that killed saves of `target` left (see replacing()); log each one.
    pattern = _sibling_pattern(target.name, old=old)
    try:
        names = sorted(p.name for p in target.parent.iterdir() if pattern.fullmatch(p.name))
    except OSError:
        return
    kind = "the previous encoder a save killed between its renames left" if old else "a partial copy a killed save left"
    for name in names:
        sibling = target.parent / name
        try:
            if not sibling.is_dir() or sibling.is_symlink() or sibling.lstat().st_ctime >= start:
                continue  # not ours, or made after this save began: perhaps another save's
        except OSError:
            continue
        lock = _lock(sibling)
        if lock is None:
            logger.warning("left %s (%s?): cannot tell whether a save is writing it; delete it", sibling, kind)
            continue
        if lock < 0:
            continue  # a live save holds it
        try:
            shutil.rmtree(sibling)
        except OSError as err:
            logger.warning("could not remove %s (%s): %s; delete it", sibling, kind, err)
        else:
            logger.warning("removed %s (%s)", sibling, kind)
        finally:
            os.close(lock)


def _swap_in(partial: Path, target: Path, lock: int | None = None) -> None:
    if lock is not None and not os.path.samestat(os.fstat(lock), os.stat(partial)):
        raise OSError(f"{printable(str(partial))} was replaced while the save wrote it; nothing was swapped in")
    old, held = None, None
    if target.exists():
        held = _lock(target)  # so that another save's cleanup leaves it while it is aside (best effort)
        old = target.with_name(f".{target.name}.tmp-old-{uuid.uuid4().hex[:_HEX]}")
    try:
        if old is not None:
            os.rename(target, old)
        try:
            os.rename(partial, target)
        except BaseException:
            if old is not None:
                os.rename(old, target)
            raise
        if old is not None:
            try:
                shutil.rmtree(old)
            except OSError as err:  # the new folder is in place: the save itself succeeded
                logger.warning(
                    "saved %s, but could not remove the previous folder %s (%s); delete it", target, old, err
                )
    finally:
        if held is not None and held >= 0:
            os.close(held)


# --------------------------------------------------------------------------- transformers' loaders


def check_dtype(dtype: torch.dtype | str | None) -> torch.dtype | str | None:
    """``dtype`` as transformers takes it: a ``torch.dtype``, ``"auto"`` or ``None``.

    Raises:
        ValueError: for an unknown dtype name.
    """
    if isinstance(dtype, str) and dtype != "auto":
        if not isinstance(getattr(torch, dtype, None), torch.dtype):
            raise ValueError(
                f"unknown dtype {printable(repr(dtype))}; use e.g. 'float32', 'bfloat16', 'float16' or 'auto'"
            )
        return getattr(torch, dtype)
    return dtype


def load_config(name_or_path: str | os.PathLike[str], **hf_kwargs: Any) -> Any:
    """The model's transformers config (cheap: no weights), checked (:func:`check_config`). Keyword arguments
    other than ``revision``, ``gguf_file``, ``cache_dir``, ``token``, ``local_files_only`` and ``subfolder``
    are ignored; transformers always gets ``trust_remote_code=False``.

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
            if not (where / "config.json").is_file():
                raise OSError(f"no config.json in {printable(str(where))}: not a model folder")
            raw = read_json(where / "config.json", _FIX)
            if not isinstance(raw, dict):
                raise OSError(f"{file} is not a JSON object; {_FIX}")
            for key in ("dtype", "torch_dtype"):  # transformers would fail on getattr(torch, value)
                value = raw.get(key)
                if value is not None and not isinstance(getattr(torch, str(value), None), torch.dtype):
                    raise OSError(f"{file}: {key} {printable(repr(value))} is not a torch dtype; {_FIX}")
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
        raise OSError(f"{file} does not load: {_reason(err)}; {_FIX}") from None
    check_config(config, file)
    return config


_FIX = "re-download the model or re-save the encoder"


def check_config(config: Any, file: str) -> None:
    """Refuse config values that transformers accepts and then fails on deep inside the model's constructor.

    Args:
        config: a transformers config.
        file: how the config's file is named in messages.

    Raises:
        OSError: naming the file, the field and its value: an activation or a rope type transformers does not
            know, a sliding window that is not a positive integer.
    """
    from transformers.activations import ACT2FN
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    for name in ("hidden_act", "hidden_activation"):
        act = getattr(config, name, None)
        if isinstance(act, str) and act not in ACT2FN:
            raise OSError(
                f"{file}: {name} {printable(repr(act))} is not an activation transformers knows "
                f"(e.g. 'silu', 'gelu_pytorch_tanh'); {_FIX}"
            )
    window = getattr(config, "sliding_window", None)
    if window is not None and (isinstance(window, bool) or not isinstance(window, int) or window < 1):
        raise OSError(f"{file}: sliding_window {printable(repr(window))} is not a positive integer or null; {_FIX}")
    rope = getattr(config, "rope_parameters", None)
    # One dict, or one per layer type (Gemma3: full_attention and sliding_attention).
    ropes = [rope] if isinstance(rope, dict) and "rope_type" in rope else list((rope or {}).values())
    for params in ropes:
        kind = params.get("rope_type", "default") if isinstance(params, dict) else None
        if kind != "default" and kind not in ROPE_INIT_FUNCTIONS:
            raise OSError(
                f"{file}: rope_parameters has rope_type {printable(repr(kind))}, which transformers does not know "
                f"({', '.join(['default', *sorted(ROPE_INIT_FUNCTIONS)])}); {_FIX}"
            )


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
            f"the model in {where} does not build from its config.json and the arguments given ({_reason(err)}); {_FIX}"
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
