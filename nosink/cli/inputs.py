"""What the commands read: texts files, the evaluation data folder, and the model a name stands for.

The library is imported inside each function: the parsers import this module, and ``--help`` must not
load torch.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from nosink.checks import printable
from nosink.cli.args import DATA_ENV

EXAMPLE_SPEC = "F* | M0B*4"  # the spec a "give --spec" message suggests


def lines_of(name: str) -> list[str]:
    """The lines of a texts file; ``-`` is standard input (``./-`` is a file of that name), as in Unix tools."""
    from nosink.models.texts import read_lines

    if name == "-":
        return read_lines("standard input", sys.stdin.buffer.read())
    return read_lines(name)


def texts_of(name: str) -> list[str]:
    """The lines of a texts file (``-``: standard input), refusing blank ones (row i of the output must be line i)."""
    lines = lines_of(name)
    blank = [i for i, line in enumerate(lines, 1) if not line.strip()]
    if blank:
        shown = ", ".join(map(str, blank[:5])) + (", ..." if len(blank) > 5 else "")
        where = "standard input" if name == "-" else name
        raise ValueError(
            f"{printable(where)} has blank lines ({shown}); remove them so that row i of the output is line i"
        )
    return lines


def data_folder(sub: str = "") -> Path | None:
    """``$NOSINK_DATA/SUB`` when the variable is set and the folder exists; says so on stderr."""
    root = os.environ.get(DATA_ENV)
    if not root:
        return None
    folder = Path(root).expanduser() / sub
    if not folder.is_dir():
        return None
    print(f"using {printable(str(folder))} (from ${DATA_ENV}; --data or --data-dir chooses another)", file=sys.stderr)
    return folder


def load_config(name: str) -> Any:
    # The one import of the library's config loader (with its checks); update here if it moves.
    from nosink.models.loading import load_config

    return load_config(name)


def model_path(name: str) -> str:
    """A short name ('demo', 'qwen2.5-0.5b', ...) as its hub id or converted folder; a local folder as its path
    (``~`` expanded); else a hub id that exists.

    The short names are :data:`nosink.models.weights.MODELS`, resolved by
    :func:`nosink.models.weights.model_path`. Whether ``name`` is a path or a hub id is
    :func:`nosink.models.loading.local_folder`'s rule.

    Raises:
        OSError: naming the folder that does not exist (or is a file), before any other check on it.
    """
    from nosink.models.loading import local_folder
    from nosink.models.weights import MODELS
    from nosink.models.weights import model_path as short_name_path

    if name in MODELS:
        return short_name_path(name)
    folder = local_folder(name)  # the library's rule for "a path, not a hub id"; raises for a missing one
    if folder is not None:
        return str(folder)
    shown = printable(name)
    try:
        load_config(name)
    except OSError as err:
        reason = printable(str(err).strip().splitlines()[0]) if str(err).strip() else type(err).__name__
        raise OSError(f"no model folder at {shown}, and no hub model of that name ({reason})") from err
    return name


def saved_encoder(path: str, spec: str | None) -> dict[str, Any] | None:
    """The ``nosink.json`` of ``path`` when it is a folder written by ``save_pretrained``, else ``None``.

    Raises:
        ValueError: when ``spec`` is ``None`` and ``path`` is not a saved encoder (a plain decoder needs
            ``--spec``); said here in the command line's words, not the Python API's ``spec=``.
        OSError: for a ``nosink.json`` that does not read.
    """
    from nosink.models.loading import local_folder
    from nosink.models.saved import read_saved

    folder = local_folder(path)
    saved = read_saved(folder) if folder is not None else None
    if spec is None and saved is None:
        raise ValueError(f"{printable(path)} is a plain decoder: give --spec, e.g. --spec '{EXAMPLE_SPEC}'")
    return saved


def is_baseline(name: str) -> bool:
    """Whether ``name`` is one of the evaluations' encoder baselines (all-MiniLM-L6-v2, ...)."""
    from nosink.evals.baselines import BASELINES

    return name in BASELINES


def refuse_for_baseline(args: argparse.Namespace, *options: str) -> None:
    """Refuse decoder-only options given for an encoder baseline, naming them."""
    given = [o for o in options if getattr(args, o[2:].replace("-", "_"), None) is not None]
    if given:
        verb = "is" if len(given) == 1 else "are"
        raise ValueError(f"{' and '.join(given)} {verb} for decoders, not for the encoder baseline {args.model}")
