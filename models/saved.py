"""The saved-encoder folder: its format, its checks, and writing it whole or not at all.

A saved encoder is a plain transformers folder (``config.json``, safetensors weights, tokenizer files)
with a ``nosink.json`` beside it (format 1). A fine-tuned encoder (``nosink finetune``) is a ``nosink.json`` of
format 2 naming its base model (a hub id or folder, or ``base/`` inside the folder when copied) and a LoRA adapter
in ``adapter/`` (:mod:`nosink.models.adapters`); readers of format 1 refuse it with "upgrade nosink".
:func:`replacing` builds the new folder as a hidden sibling and swaps it
in, so a reader never sees old and new files mixed.

A save killed part-way (``kill -9``, power loss) can leave hidden ``.NAME.tmp-*`` siblings behind: the
next save of the same folder removes them (see :func:`replacing`), and loading a missing folder says
when such a sibling holds the previous encoder.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nosink.checks import positive_int, printable

from .configs import read_json
from .families import make_serializable
from .texts import Template

if TYPE_CHECKING:
    from .encoder import EncoderFromDecoder

__all__ = [
    "ADAPTED_FORMAT",
    "FORMAT",
    "SAVED_FILE",
    "base_of",
    "is_adapted",
    "check_save_target",
    "check_saved",
    "check_sink_token",
    "check_weights",
    "interrupted_save",
    "read_saved",
    "replacing",
    "save_encoder",
    "template_from_json",
    "template_to_json",
    "write_encoder_files",
]

logger = logging.getLogger(__name__)

SAVED_FILE = "nosink.json"
FORMAT = 2  # version of the nosink.json layout: 2 added the optional exit_layer, template, prepend, base and adapter
READS = (1, 2)  # the versions this one reads (a format-1 folder has none of them)
ADAPTED_FORMAT = FORMAT  # a fine-tuned encoder's: the base model's reference ("base") and an adapter folder ("adapter")


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

    The ``template`` entry is returned as written (see :func:`template_from_json` for the Template).

    Raises:
        OSError: if the file is not valid JSON, lacks the spec, has a bad ``sink_token``, ``exit_layer`` or
            ``template``, or has a newer format than this version reads.
    """
    file = Path(os.path.expanduser(os.fspath(name_or_path))) / SAVED_FILE
    if not file.is_file():
        return None
    where = printable(str(file))
    meta = read_json(file, "re-save the encoder with save_pretrained()")
    if not isinstance(meta, dict) or not isinstance(meta.get("spec"), str):
        raise OSError(f"{where} has no 'spec' string; re-save the encoder with save_pretrained()")
    if meta.get("format") not in READS:
        raise OSError(
            f"{where} has format {printable(repr(meta.get('format')))}; this version of nosink reads formats "
            f"{' and '.join(map(str, READS))}: upgrade nosink or re-save the encoder"
        )
    if "base" in meta or "adapter" in meta:  # a fine-tuned encoder (see is_adapted)
        for key in ("base", "adapter"):
            if not isinstance(meta.get(key), str) or not meta[key]:
                raise OSError(f"{where} (a fine-tuned encoder) has no {key!r} string; run nosink finetune again")
    try:
        if "sink_token" in meta:
            check_sink_token(meta["sink_token"])
        if meta.get("exit_layer") is not None:
            positive_int(meta["exit_layer"], "exit_layer")
        template_from_json(meta.get("template"))
    except (TypeError, ValueError) as err:
        raise OSError(f"{where}: {err}") from None
    prepend = meta.get("prepend")
    if prepend is not None and not (
        isinstance(prepend, list) and len(prepend) == 2 and all(type(x) is int and x >= 0 for x in prepend)
    ):
        raise OSError(f"{where}: 'prepend' must be [start, stop] (two layer numbers), got {printable(repr(prepend))}")
    return meta


def template_to_json(template: Template | None) -> str | dict[str, Any] | None:
    """How ``nosink.json`` records a template: a preset's name, or a custom template's fields (``None``: none).

    >>> from nosink.models.templates import PROMPT_EOL
    >>> template_to_json(PROMPT_EOL), template_to_json(Template("Doc: {text}"))
    ('PromptEOL', {'formats': ['Doc: {text}'], 'target': 'text', 'copy': None, 'name': ''})
    """
    from .templates import PRESETS

    if template is None:
        return None
    if PRESETS.get(template.name) == template:
        return template.name
    return {"formats": list(template.formats), "target": template.target, "copy": template.copy, "name": template.name}


def template_from_json(value: Any) -> Template | None:
    """The template :func:`template_to_json` wrote (``None`` for none).

    Raises:
        ValueError: for an unknown preset name, or fields that make no template (quoting them).
        TypeError: for a value that is neither a name, a dict nor ``None``.
    """
    from .templates import by_name

    if value is None:
        return None
    if isinstance(value, str):
        return by_name(value)
    if not isinstance(value, dict):
        raise TypeError(
            f"template must be a preset's name or a dict of formats/target/copy, got {type(value).__name__}"
        )
    unknown = sorted(set(value) - {"formats", "target", "copy", "name"})
    if unknown or not isinstance(value.get("formats"), list):
        raise ValueError(
            f"template {printable(repr(value))}: expected the keys formats (a list of prompts), target, copy and name"
        )
    return Template(
        tuple(value["formats"]), target=value.get("target", "text"), copy=value.get("copy"), name=value.get("name", "")
    )


def is_adapted(saved: dict[str, Any]) -> bool:
    """Whether a folder's ``nosink.json`` is a fine-tuned encoder's: a base model's reference and an adapter."""
    return saved.get("adapter") is not None


def base_of(folder: Path, saved: dict[str, Any]) -> str:
    """The base model of a fine-tuned encoder's folder: a relative ``base`` is inside the folder, else as written.

    A relative name that is no folder inside ``folder`` is a hub id (``HuggingFaceTB/SmolLM2-135M``).
    """
    base = saved["base"]
    inside = folder / base
    if not os.path.isabs(base) and inside.is_dir():
        return str(inside)
    return base


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


def check_save_target(directory: str | os.PathLike[str]) -> Path:
    """The absolute folder :func:`save_encoder` would write for ``directory``, once every refusal it makes has been
    made (see its ``Raises``): a caller that saves at the end of a long run checks first.

    Raises:
        FileExistsError: as :func:`save_encoder`.
        FileNotFoundError: as :func:`save_encoder`.
        PermissionError: if the folder that would hold it cannot be written.
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
    if above is not None and not os.access(above, os.W_OK | os.X_OK):
        raise PermissionError(f"refusing to save to {given}: {printable(str(above))} cannot be written")
    if directory.exists():
        if not directory.is_dir():
            raise FileExistsError(f"{printable(str(directory))} is a file: save the encoder to a folder")
        if not (directory / SAVED_FILE).is_file() and any(directory.iterdir()):
            raise FileExistsError(
                f"{printable(str(directory))} is not empty and holds no {SAVED_FILE}: refusing to replace a folder "
                "that is not a saved encoder; save to a new or empty folder"
            )
    return directory


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
        PermissionError: if the folder that would hold it cannot be written.
    """
    directory = check_save_target(directory)
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
    meta: dict[str, Any] = {
        "format": 1,
        "spec": str(encoder.spec),
        "sink_token": encoder.sink_token,
        "model_type": decoder.config.model_type,
        "num_hidden_layers": encoder.parts.depth,
    }
    added = {
        "exit_layer": encoder.exit_layer,
        "template": template_to_json(encoder.template),
        "prepend": None if encoder.prepend is None else list(encoder.prepend),  # layers start..stop-1
    }
    if any(value is not None for value in added.values()):
        # Only a folder that needs format 2 says so: nosink versions that read format 1 alone still load the
        # rest, and refuse (rather than ignore) an exit, a template or Token Prepending they do not know.
        meta |= {"format": FORMAT, **added}
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
