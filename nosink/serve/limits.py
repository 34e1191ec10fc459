"""What a request may ask for (:class:`Limits`) and how a refusal is answered (:class:`ApiError`)."""

import math
from dataclasses import dataclass
from typing import Any

from nosink.checks import positive_int, printable


@dataclass(frozen=True)
class Limits:
    """What one request may ask for, and how the worker gathers embedding requests into batches.

    Raises:
        ValueError: for a limit that is not a positive integer (``batch_wait_ms``: a non-negative number;
            ``chat_share``: a number above 0 and below 1, so that neither side can starve).
    """

    max_inputs: int = 256  # texts per embeddings request (more: 413)
    max_tokens_per_text: int = 512  # sink token + prompt + text (more: 400, never cut silently)
    max_body_bytes: int = 4 * 1024 * 1024  # request body (more: 413)
    batch_texts: int = 64  # texts gathered from waiting requests (at least batch_size), sorted, cut into batches
    batch_size: int = 8  # texts per forward pass, cut from the gathered texts sorted by length
    batch_wait_ms: float = 5.0  # how long the first waiting request waits for companions
    max_prompt_tokens: int = 4096  # chat prompt after the chat template (more: 400)
    max_new_tokens: int = 1024  # the largest max_tokens a chat request may ask for
    default_max_tokens: int = 256  # max_tokens when a chat request gives none
    max_active_chats: int = 16  # generations decoded side by side (one batch); more wait their turn
    chat_share: float = 0.5  # the model's time chat steps get while embeddings wait too (the rest: batches)
    max_queue: int = 1024  # requests waiting for the worker (more: 503)
    # Slow or idle clients (enforced by the HTTP server of run() and ServerThread, see _guarded):
    header_timeout_s: float = 10.0  # a request's headers, from its first byte (or the connection): else 408, closed
    body_timeout_s: float = 30.0  # a request's body, from the end of its headers: else 408, closed
    max_connections_per_client: int = 64  # open connections from one IP address (more: 503, closed)
    max_connections: int = 512  # open connections in all (more: 503, closed)

    def __post_init__(self) -> None:
        for name in self.__dataclass_fields__:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
                raise ValueError(f"Limits.{name} must be a non-negative number, got {printable(repr(value))}")
            if name.endswith("_s") and not (value > 0 and math.isfinite(value)):
                raise ValueError(f"Limits.{name} must be a positive number of seconds, got {printable(repr(value))}")
            if name == "chat_share" and not 0 < value < 1:
                raise ValueError(
                    f"Limits.chat_share must be above 0 and below 1 (a share of the model's time; 0 or 1 would "
                    f"starve one side), got {printable(repr(value))}"
                )
            if name not in ("batch_wait_ms", "chat_share") and not name.endswith("_s"):
                positive_int(value, f"Limits.{name}")


class ApiError(Exception):
    """An error answered with OpenAI's body: ``{"error": {"message", "type", "param", "code"}}``.

    Args:
        status: the HTTP status.
        message: what was wrong and what is accepted; client text in it goes through ``printable``.
        code: a short machine-readable name (``"model_not_found"``, ``"context_length_exceeded"``, ...).
        param: the request field at fault, if one is.
        kind: OpenAI's error ``type``.
    """

    def __init__(
        self, status: int, message: str, code: str, param: str | None = None, kind: str = "invalid_request_error"
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.code, self.param, self.kind = status, message, code, param, kind

    def __reduce__(self) -> tuple:  # crosses between processes whole (Exception pickles only its message)
        return type(self), (self.status, self.message, self.code, self.param, self.kind)

    def body(self) -> dict[str, Any]:
        """The JSON body of the answer."""
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}}


# ---------------------------------------------------------------------------------------------- loading
