"""Missing test resources (the real SmolLM2 copy, ``../shared/data``): a skip, or a failure in CI.

``NOSINK_REQUIRE_RESOURCES=1`` (set by README's test command, which CI runs) turns every
"resource missing" skip into a failure, so a CI run cannot pass by skipping its real-model and
real-data tests.
"""

import os

import pytest


def required() -> bool:
    """True when missing resources must fail the run (``NOSINK_REQUIRE_RESOURCES=1``)."""
    return os.environ.get("NOSINK_REQUIRE_RESOURCES") == "1"


def missing(reason: str) -> None:
    """Skip the calling test because ``reason``; fail it instead when resources are required."""
    if required():
        pytest.fail(f"{reason} (NOSINK_REQUIRE_RESOURCES=1 makes this a failure)", pytrace=False)
    pytest.skip(reason)
