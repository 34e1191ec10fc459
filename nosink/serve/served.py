"""What a server serves, as its HTTP side needs it: names, sizes, the tokenizer and limits, but no weights."""

import time
from dataclasses import dataclass, field
from typing import Any

from nosink.models.texts import Template
from nosink.serve.limits import Limits


@dataclass(frozen=True)
class Embedding:
    """One embedding configuration as served: its model id, how its inputs are tokenized, what ``/v1/models`` shows.

    The engine keeps the compiled plan of each, by ``name``.

    Attributes:
        name: the model id clients send for it.
        spec: its layer spec (canonical string).
        exit_layer: the decoder layers it runs (an early exit), or None for all of them.
        template: the one-prompt template around each text, or None.
        dims: the width of its vectors.
    """

    name: str
    spec: str
    exit_layer: int | None
    template: Template | None
    dims: int

    def framing(self) -> dict[str, Any]:
        """The keyword arguments of :func:`nosink.models.texts.tokenize` that put a text in the template."""
        if self.template is None:
            return {}
        return {"template": self.template.formats[0], "target": self.template.target, "copy": self.template.copy or 1}

    def card(self) -> dict[str, Any]:
        """What ``/v1/models`` says of it."""
        template = None if self.template is None else str(self.template)
        return {"spec": self.spec, "exit_layer": self.exit_layer, "template": template, "dimensions": self.dims}


@dataclass
class Served:
    """The description the routes serve from (picklable: a front-end process gets a copy).

    Attributes:
        name: the model id of chat (and of the embedding configuration served under the model's own name).
        tokenizer: the model's tokenizer (tokenizes inputs, renders chat prompts).
        embeddings: the embedding configurations by model id, in the order given.
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
    embeddings: dict[str, Embedding]
    sink: list[int]
    positions: int | None
    chat: bool
    prompts: dict[str, str]
    api_key: str | None
    limits: Limits
    started: int = field(default_factory=lambda: int(time.time()))
    workers: int = 0

    def ids(self) -> list[str]:
        """Every model id served: chat's (when chat is served or an embedding configuration bears it), then the rest."""
        first = [self.name] if self.chat or self.name in self.embeddings else []
        return first + [name for name in self.embeddings if name != self.name]

    def described(self) -> str:
        """The served ids in a few words: ``tiny (spec F* | B*2, chat), sts (spec F* | B @ exit 3)``."""
        parts = []
        for name in self.ids():
            config = self.embeddings.get(name)
            what = []
            if config is not None:
                exit = "" if config.exit_layer is None else f" @ exit {config.exit_layer}"
                what.append(f"spec {config.spec}{exit}")
                if config.template is not None:
                    what.append(f"template {config.template}")
            if name == self.name and self.chat:
                what.append("chat")
            parts.append(f"{name} ({', '.join(what)})")
        return ", ".join(parts)
