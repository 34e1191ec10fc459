"""Test-wide settings: never reach for the Hugging Face hub (each attempt retries for ~25 s offline)."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
