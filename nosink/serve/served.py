"""What a server serves, as its HTTP side needs it: names, sizes, the tokenizer and limits, but no weights."""

import time
from dataclasses import dataclass, field
from typing import Any

from nosink.serve.limits import Limits


@dataclass
class Served:
    """The description the routes serve from (picklable: a front-end process gets a copy).

    Attributes:
        name: the model id clients send.
        tokenizer: the model's tokenizer (tokenizes inputs, renders chat prompts).
        spec: the embeddings' layer spec, as shown by ``/v1/models``.
        dims: the width of an embedding.
        sink: the token ids put before every input (the sink token).
        positions: the model's positions (``max_position_embeddings``), if it has a limit.
        chat: whether ``/v1/chat/completions`` is served.
        prompts: named instructions for embeddings.
        api_key: the key every ``/v1`` request must bring, or None.
        limits: request limits and batching.
        started: when the server started (Unix seconds).
        workers: front-end processes serving it (0: the routes run beside the model).
    """

    name: str
    tokenizer: Any
    spec: str
    dims: int
    sink: list[int]
    positions: int | None
    chat: bool
    prompts: dict[str, str]
    api_key: str | None
    limits: Limits
    started: int = field(default_factory=lambda: int(time.time()))
    workers: int = 0
