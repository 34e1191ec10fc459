"""One process serves chat and embeddings from one copy of a decoder's weights (OpenAI-compatible HTTP).

:func:`create_app` builds the encoder with :meth:`EncoderFromDecoder.from_model` (its parameters are the
LM's tensors) and serves ``POST /v1/embeddings``, ``POST /v1/chat/completions`` (with ``stream``),
``GET /v1/models`` and ``GET /health``. One worker thread runs every forward pass, so the encoder and the
LM, which share every layer, never interleave; each turn it runs one embedding batch, then chat tokens for
as long as that batch took. :func:`bind` binds the address before the model loads; :func:`run` and
:class:`ServerThread` serve on it. The serving guide (``docs/guides/serving.md``) gives the request
fields, batching, limits and error codes.

Needs the ``serve`` extra (FastAPI and uvicorn); ``import nosink`` does not import it.
"""

import asyncio
import base64
import concurrent.futures
import hmac
import json
import logging
import math
import os
import queue
import socket
import threading
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from nosink.checks import positive_int, printable
from nosink.layerspec import Spec
from nosink.models import EncoderFromDecoder
from nosink.models import texts as _texts

__all__ = [
    "ApiError",
    "Limits",
    "ServerThread",
    "bind",
    "check_api_key",
    "check_device",
    "create_app",
    "load_model",
    "run",
]

logger = logging.getLogger(__name__)

# OpenAI's chat roles; "developer" is the newer name of "system".
_ROLES = ("system", "developer", "user", "assistant")

# OpenAI chat fields not implemented here, with the values that ask for nothing; any other value is refused.
_UNSUPPORTED_CHAT: dict[str, tuple[Any, ...]] = {
    "tools": (None, []),
    "tool_choice": (None, "none"),
    "functions": (None, []),
    "function_call": (None, "none"),
    "parallel_tool_calls": (None, False, True),  # meaningless without tools
    "logprobs": (None, False),
    "top_logprobs": (None, 0),
    "logit_bias": (None, {}),
    "presence_penalty": (None, 0),
    "frequency_penalty": (None, 0),
    "response_format": (None, {"type": "text"}),
    "modalities": (None, ["text"]),
    "audio": (None,),
    "prediction": (None,),
    "web_search_options": (None,),
}

# Codes of the web framework's own routing errors; any other status: "http_error".
_HTTP_ERRORS = {404: "not_found", 405: "method_not_allowed"}


@dataclass(frozen=True)
class Limits:
    """What one request may ask for, and how the worker gathers embedding requests into batches.

    Raises:
        ValueError: for a limit that is not a positive integer (``batch_wait_ms``: a non-negative number).
    """

    max_inputs: int = 256  # texts per embeddings request (more: 413)
    max_tokens_per_text: int = 512  # sink token + prompt + text (more: 400, never cut silently)
    max_body_bytes: int = 4 * 1024 * 1024  # request body (more: 413)
    batch_texts: int = 64  # texts gathered from waiting requests, sorted by length, cut into batches
    batch_size: int = 8  # texts per forward pass, cut from the gathered texts sorted by length
    batch_wait_ms: float = 5.0  # how long the first waiting request waits for companions
    max_prompt_tokens: int = 4096  # chat prompt after the chat template (more: 400)
    max_new_tokens: int = 1024  # the largest max_tokens a chat request may ask for
    default_max_tokens: int = 256  # max_tokens when a chat request gives none
    max_active_chats: int = 4  # generations decoded side by side; more wait their turn
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
            if name != "batch_wait_ms" and not name.endswith("_s"):
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

    def body(self) -> dict[str, Any]:
        """The JSON body of the answer."""
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}}


# ---------------------------------------------------------------------------------------------- loading


def check_device(device: torch.device | str | None) -> torch.device | None:
    """``device`` as a ``torch.device`` if this machine can run a model there (None stays None).

    Raises:
        ValueError: for a device name torch does not know, CUDA or MPS that this torch build or
            machine does not have, or a CUDA index past the machine's devices.
    """
    if device is None:
        return None
    try:
        where = torch.device(device)
    except (RuntimeError, TypeError):
        raise ValueError(
            f"unknown device {printable(repr(device))[:80]}: use cpu, cuda, cuda:1, mps, ... (the CPU: --device cpu)"
        ) from None
    if where.type == "cuda":
        if not torch.cuda.is_available():
            why = "this torch build has no CUDA" if torch.version.cuda is None else "this machine has no usable GPU"
            raise ValueError(f"CUDA is not available ({why}, torch {torch.__version__}); use --device cpu")
        count = torch.cuda.device_count()
        if where.index is not None and where.index >= count:
            raise ValueError(
                f"there is no {where}: this machine has {count} CUDA device(s), cuda:0 to cuda:{count - 1}"
            )
    if where.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError("MPS is not available in this torch build / on this machine; use --device cpu")
    return where


def check_api_key(api_key: str | None, name: str = "api_key") -> str | None:
    """``api_key`` if a client can send it: a non-empty string of printable ASCII, no spaces at its ends; or None.

    Raises:
        ValueError: naming ``name``, for an empty or blank key (never read as "no key") or one that no
            ``Authorization`` header can carry.
    """
    if api_key is None:
        return None
    if not isinstance(api_key, str) or not api_key.strip():
        raise ValueError(f"{name} must be a non-empty string, or None for no key")
    if api_key != api_key.strip() or not all(" " <= c <= "~" for c in api_key):
        raise ValueError(
            f"{name} has spaces at its ends or characters other than printable ASCII, which no Authorization "
            "header can carry: use letters, digits and punctuation, without spaces at the ends"
        )
    return api_key


def load_model(
    name_or_path: str | Path,
    *,
    chat: bool = True,
    dtype: torch.dtype | str | None = None,
    device: torch.device | str | None = None,
) -> tuple[torch.nn.Module, Any]:
    """The model to serve and its tokenizer, loaded once: a causal LM (with its head) for chat, else the bare decoder.

    Args:
        name_or_path: a hub id or a local transformers folder.
        chat: load the LM head too (a causal LM); ``False`` loads the bare decoder.
        dtype: the weights' dtype (``torch.bfloat16``, ``"float32"``, ...); the checkpoint's by default.
        device: where to put the model.

    Raises:
        OSError: if there is no such model, or its weights do not fit its config.
        ValueError: for an unknown dtype name, or a device this machine does not have (:func:`check_device`).
    """
    from nosink.models.loading import load_config, load_model, load_tokenizer

    device = check_device(device)  # before the weights are read
    load_config(name_or_path)  # a missing folder fails here, with the library's message
    try:
        model = load_model(name_or_path, dtype=dtype, attn_implementation="sdpa", saved=False, head=chat)
    except OSError as err:
        if chat and "no LM head" in str(err):
            raise OSError(f"{err} (serve it with --no-chat, chat=False)") from None
        raise
    tokenizer = load_tokenizer(name_or_path)
    if tokenizer is None:
        raise OSError(f"{name_or_path} has no tokenizer: the server needs one")
    model = model.eval()
    return (model.to(device) if device is not None else model), tokenizer


# ---------------------------------------------------------------------------------------------- the worker


@dataclass
class _EmbedJob:
    tokens: _texts.Tokenized  # the request's inputs (sink token, prompt, text), tokenized once by its handler
    future: concurrent.futures.Future = field(default_factory=concurrent.futures.Future)
    cancelled: bool = False
    lengths: list[int] = field(init=False)  # tokens per input: sorts the gathered inputs
    # Filled by the worker thread, chunk by chunk.
    vectors: np.ndarray | None = None
    left: int = 0

    def __post_init__(self) -> None:
        self.lengths = self.tokens.lengths

    def __len__(self) -> int:
        return len(self.tokens)


@dataclass
class _Sampling:
    max_tokens: int
    temperature: float
    top_p: float
    stop: tuple[str, ...]
    seed: int | None


@dataclass
class _ChatJob:
    prompt_ids: list[int]
    sampling: _Sampling
    emit: Callable[[tuple], None]  # thread-safe: hands an event to the request's coroutine
    cancelled: bool = False
    # Decoding state, touched by the worker thread only.
    ids: list[int] = field(default_factory=list)
    cache: Any = None
    sent: int = 0  # characters of the answer already emitted
    generator: torch.Generator | None = None


_STOP = object()


class _Worker:
    """The one thread that runs the model: embedding batches and chat tokens, in turns."""

    def __init__(self, encoder: EncoderFromDecoder, lm: torch.nn.Module | None, tokenizer: Any, limits: Limits) -> None:
        self.encoder, self.lm, self.tokenizer, self.limits = encoder, lm, tokenizer, limits
        self.inbox: queue.Queue = queue.Queue()
        self.embeds: list[_EmbedJob] = []  # waiting requests
        self.chunks: deque[list[tuple[_EmbedJob, int]]] = deque()  # gathered (job, input index), one batch each
        self.waiting: list[_ChatJob] = []
        self.active: list[_ChatJob] = []
        self.deadline: float | None = None  # when the oldest waiting embedding request stops waiting
        self.stats = {"embedding_batches": 0, "embedded_texts": 0, "chat_tokens": 0, "dropped": 0}
        eos = getattr(getattr(lm, "generation_config", None), "eos_token_id", None) if lm is not None else None
        eos = eos if eos is not None else tokenizer.eos_token_id
        self.eos = set(eos if isinstance(eos, (list, tuple)) else [eos]) - {None}
        self.thread = threading.Thread(target=self._loop, name="nosink-model", daemon=True)

    # -- called from the event loop

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.inbox.put(_STOP)
        self.thread.join(timeout=30)

    def busy(self) -> int:
        return self.inbox.qsize() + len(self.embeds) + len(self.chunks) + len(self.waiting) + len(self.active)

    def submit(self, job: _EmbedJob | _ChatJob) -> None:
        if self.busy() >= self.limits.max_queue:
            raise ApiError(503, "the server is overloaded; retry later", "server_overloaded", kind="server_error")
        self.inbox.put(job)

    # -- the worker thread

    def _loop(self) -> None:
        with torch.inference_mode():
            while True:
                try:
                    if not self._take():
                        break
                    spent = 0.0
                    if self.chunks or (self.embeds and self._embeddings_due()):
                        start = time.perf_counter()
                        self._embed_step()
                        spent = time.perf_counter() - start
                    while self.waiting and len(self.active) < self.limits.max_active_chats:
                        self.active.append(self.waiting.pop(0))
                    # Chats get as long as that batch took (at least one token each): about half the worker each.
                    start = time.perf_counter()
                    while self.active:
                        for chat in list(self.active):
                            self._step(chat)
                        if time.perf_counter() - start >= spent:
                            break
                except Exception:  # the worker must outlive any one request
                    logger.exception("model worker: unexpected error (the worker goes on)")

    def _take(self) -> bool:
        """Move what is in the inbox into the worker's lists; False once asked to stop."""
        if self.active or self.waiting or self.chunks:
            timeout: float | None = 0.0
        elif self.embeds and self.deadline is not None:
            timeout = max(0.0, self.deadline - time.monotonic())
        else:
            timeout = None
        items = []
        try:
            items.append(self.inbox.get(timeout=timeout) if timeout != 0.0 else self.inbox.get_nowait())
            while True:
                items.append(self.inbox.get_nowait())
        except queue.Empty:
            pass
        for item in items:
            if item is _STOP:
                for job in self.embeds + [job for rows in self.chunks for job, _ in rows]:
                    if not job.future.cancel() and not job.future.done():  # already running
                        job.future.set_exception(RuntimeError("the server is shutting down"))
                for chat in self.waiting + self.active:
                    self._emit(chat, ("error", "the server is shutting down"))
                return False
            if isinstance(item, _EmbedJob):
                if not self.embeds:
                    self.deadline = time.monotonic() + self.limits.batch_wait_ms / 1000
                self.embeds.append(item)
            else:
                self.waiting.append(item)
        return True

    def _embeddings_due(self) -> bool:
        waiting = sum(len(job) for job in self.embeds)
        return waiting >= self.limits.batch_texts or time.monotonic() >= (self.deadline or 0.0)

    def _embed_step(self) -> None:
        """Encode one chunk of gathered texts, first gathering the waiting requests if no chunk is left."""
        if not self.chunks:
            self._gather()
        if self.chunks:
            self._run_chunk(self.chunks.popleft())

    def _gather(self) -> None:
        """Cut the inputs of waiting requests (up to ``batch_texts`` texts, any prompts) into length-sorted chunks."""
        jobs, count = [], 0
        while self.embeds and (not jobs or count + len(self.embeds[0]) <= self.limits.batch_texts):
            job = self.embeds.pop(0)
            if job.cancelled or not job.future.set_running_or_notify_cancel():
                self.stats["dropped"] += 1  # its client is gone: not computed
                continue
            jobs.append(job)
            count += len(job)
        self.deadline = time.monotonic() if self.embeds else None  # those left have waited long enough
        rows = []
        for job in jobs:
            job.left = len(job)
            rows.extend((job, i) for i in range(len(job)))
        rows.sort(key=lambda row: -row[0].lengths[row[1]])  # stable: ties keep arrival order
        size = self.limits.batch_size
        self.chunks.extend(rows[i : i + size] for i in range(0, len(rows), size))

    def _run_chunk(self, rows: list[tuple[_EmbedJob, int]]) -> None:
        rows = [(job, i) for job, i in rows if not job.cancelled and not job.future.done()]
        if not rows:
            return  # every request in it is gone or failed: its texts are not computed
        try:
            vectors = self._encode(_inputs(rows))
        except Exception as err:
            jobs = list({id(job): job for job, _ in rows}.values())
            if len(jobs) == 1:
                self._fail(jobs[0], err)
                return
            for job in jobs:  # one request's failure must not fail its batch companions
                mine = [(j, i) for j, i in rows if j is job]
                try:
                    self._deliver(mine, self._encode(_inputs(mine)))
                except Exception as alone:
                    self._fail(job, alone)
            return
        self._deliver(rows, vectors)

    def _deliver(self, rows: list[tuple[_EmbedJob, int]], vectors: np.ndarray) -> None:
        for (job, i), vector in zip(rows, vectors, strict=True):
            if job.vectors is None:
                job.vectors = np.empty((len(job), vectors.shape[1]), dtype=np.float32)
            job.vectors[i] = vector
            job.left -= 1
            if job.left == 0:
                job.future.set_result(job.vectors)

    def _fail(self, job: _EmbedJob, err: Exception) -> None:
        job.cancelled = True  # its other chunks are skipped
        job.future.set_exception(err)

    def _encode(self, tokens: _texts.Tokenized) -> np.ndarray:
        """Unit vectors of one batch of tokenized inputs, as ``encode(..., normalize_embeddings=True)`` gives them."""
        self.stats["embedding_batches"] += 1
        self.stats["embedded_texts"] += len(tokens)
        vectors = self.encoder.encode_tokens(tokens)[self.encoder.plan.name]  # (B, D), mean over text tokens
        return torch.nn.functional.normalize(vectors, dim=-1).numpy()  # a zero vector stays zero

    def _emit(self, chat: _ChatJob, event: tuple) -> None:
        try:
            chat.emit(event)
        except RuntimeError:  # the event loop is closed: nobody is listening any more
            chat.cancelled = True

    def _step(self, chat: _ChatJob) -> None:
        """Decode one token of ``chat`` (the whole prompt on its first step)."""
        if chat.cancelled:
            self.active.remove(chat)
            self.stats["dropped"] += 1
            return
        try:
            assert self.lm is not None
            if chat.cache is None:
                chat.generator = torch.Generator(device="cpu")
                if chat.sampling.seed is None:
                    chat.generator.seed()
                else:
                    chat.generator.manual_seed(chat.sampling.seed)
                feed = chat.prompt_ids
            else:
                feed = chat.ids[-1:]
            device = next(self.lm.parameters()).device
            ids = torch.tensor([feed], dtype=torch.long, device=device)  # (1, T)
            out = self.lm(input_ids=ids, cache=chat.cache, use_cache=True, logits_to_keep=1)
            chat.cache = out.cache
            token = _sample(out.logits[0, -1].float().cpu(), chat.sampling, chat.generator)  # logits: (1, 1, V)
        except Exception as err:
            logger.exception("chat generation failed")
            self.active.remove(chat)
            self._emit(chat, ("error", f"generation failed: {printable(str(err))}"))
            return
        self.stats["chat_tokens"] += 1
        finish = None
        if token in self.eos:
            finish = "stop"
        else:
            chat.ids.append(token)
        text = self.tokenizer.decode(chat.ids, skip_special_tokens=True)
        end, hit = _visible(text, chat.sampling.stop)
        if hit:
            finish = "stop"
        elif finish is None and len(chat.ids) >= chat.sampling.max_tokens:
            finish = "length"
        if finish is not None:
            end = end if hit else len(text)
        if end > chat.sent:
            self._emit(chat, ("delta", text[chat.sent : end]))
            chat.sent = end
        if finish is not None:
            self.active.remove(chat)
            chat.cache = None  # free the KV cache now, not when the request's coroutine lets go
            self._emit(chat, ("done", finish, len(chat.ids) + (token in self.eos)))


def _inputs(rows: Sequence[tuple[_EmbedJob, int]]) -> _texts.Tokenized:
    """The tokens of input ``i`` of ``job`` for each ``(job, i)`` of ``rows``, as one batch."""
    return _texts.Tokenized(
        prefix_ids=[job.tokens.prefix_ids[i] for job, i in rows], text_ids=[job.tokens.text_ids[i] for job, i in rows]
    )


def _sample(logits: torch.Tensor, sampling: _Sampling, generator: torch.Generator | None) -> int:
    """One token id from ``(V,)`` logits: greedy at temperature 0, else softmax(logits / T) cut to top_p.

    The logits are shifted to a maximum of 0 in float64 before dividing, so a tiny temperature gives no NaN.
    """
    if sampling.temperature == 0:
        return int(logits.argmax())
    logits = logits.double()
    probs = torch.softmax((logits - logits.max()) / sampling.temperature, dim=-1)  # (V,)
    if sampling.top_p < 1:
        sorted_probs, order = probs.sort(descending=True)
        outside = sorted_probs.cumsum(0) - sorted_probs >= sampling.top_p
        outside[0] = False  # kept even where top_p rounds to 0 next to the probabilities
        sorted_probs[outside] = 0
        probs = torch.zeros_like(probs).scatter(0, order, sorted_probs)
    return int(torch.multinomial(probs, 1, generator=generator))


def _visible(text: str, stops: Sequence[str]) -> tuple[int, bool]:
    """``(end, stopped)``: ``text[:end]`` may be shown; a stop string's possible start or a partial character waits."""
    hits = [i for i in (text.find(s) for s in stops) if i >= 0]
    if hits:
        return min(hits), True
    hold = max((k for s in stops for k in range(1, len(s)) if text.endswith(s[:k])), default=0)
    end = len(text) - hold
    while end > 0 and text[end - 1] == "\ufffd":  # a character whose bytes are still coming
        end -= 1
    return end, False


# ---------------------------------------------------------------------------------------------- requests


def _field(data: dict, name: str, kinds: tuple[type, ...], what: str, default: Any = None) -> Any:
    value = data.get(name, default)
    if value is None:
        return default
    if (isinstance(value, bool) and bool not in kinds) or not isinstance(value, kinds):
        raise ApiError(400, f"'{name}' must be {what}, got {type(value).__name__}", "invalid_type", name)
    return value


def _shown(value: Any) -> str:
    """A client's value as quoted in a message: its repr, escaped and cut (a JSON integer may have 4300 digits)."""
    text = printable(repr(value))
    return text if len(text) <= 80 else text[:77] + "..."


def _number(data: dict, name: str, default: float, low: float, high: float, low_open: bool = False) -> float:
    value = _field(data, name, (int, float), "a number", default)
    # Compared before float(): a huge JSON integer is out of range, not an OverflowError (NaN fails every test).
    finite = not isinstance(value, float) or math.isfinite(value)
    if not (finite and low <= value <= high) or (low_open and value == low):
        bound = f"{'>' if low_open else '>='} {low:g} and <= {high:g}"
        raise ApiError(400, f"'{name}' must be {bound}, got {_shown(value)}", "invalid_value", name)
    return float(value)


def _unicode(text: str, where: str, param: str) -> str:
    """``text`` if it is valid Unicode (JSON's ``"\\ud800"`` is not); else a 400 naming ``where`` (``input[3]``)."""
    try:
        return _texts.check_unicode(text, where)
    except ValueError as err:
        raise ApiError(400, printable(str(err)), "invalid_input", param) from None


def _texts_of(data: dict, most: int) -> list[str]:
    raw = data.get("input")
    if raw is None:
        raise ApiError(400, "'input' is required: a string or a list of strings", "missing_input", "input")
    if isinstance(raw, str):
        raw = [raw]
    if not isinstance(raw, list):
        raise ApiError(
            400, f"'input' must be a string or a list of strings, got {type(raw).__name__}", "invalid_type", "input"
        )
    if not raw:
        raise ApiError(400, "'input' is an empty list: give at least one text", "empty_input", "input")
    for i, text in enumerate(raw):
        if isinstance(text, (int, list)) and not isinstance(text, bool):
            raise ApiError(
                400,
                "token-id input is not supported: send text. Ids from another tokenizer (tiktoken, as LangChain "
                "sends by default) would be read as this model's tokens and give silently wrong vectors",
                "unsupported_input",
                "input",
            )
        if not isinstance(text, str):
            raise ApiError(400, f"'input[{i}]' must be a string, got {type(text).__name__}", "invalid_type", "input")
        if not text:
            raise ApiError(400, f"'input[{i}]' is an empty string: it has nothing to embed", "empty_input", "input")
        _unicode(text, f"input[{i}]" if isinstance(data["input"], list) else "input", "input")
    if len(raw) > most:
        raise ApiError(
            413, f"{len(raw)} inputs in one request; this server takes at most {most}", "too_many_inputs", "input"
        )
    return raw


def _embedding_options(data: dict, width: int, prompts: dict[str, str]) -> tuple[str, int, str | None]:
    """``(encoding_format, dimensions, instruction)`` of an embeddings request."""
    fmt = _field(data, "encoding_format", (str,), "'float' or 'base64'", "float")
    if fmt not in ("float", "base64"):
        message = f"'encoding_format' must be 'float' or 'base64', got {printable(repr(fmt))[:80]}"
        raise ApiError(400, message, "invalid_value", "encoding_format")
    dims = _field(data, "dimensions", (int,), "an integer", width)
    if not 1 <= dims <= width:
        message = f"'dimensions' must be from 1 to {width}, got {_shown(dims)}"
        raise ApiError(400, message, "invalid_value", "dimensions")
    prompt_name = _field(data, "prompt_name", (str,), "a string", None)
    if prompt_name is None:
        return fmt, dims, None
    if prompt_name not in prompts:
        known = ", ".join(map(repr, sorted(prompts))) or "none"
        shown = printable(repr(prompt_name))[:80]
        raise ApiError(400, f"unknown prompt_name {shown}; this server has {known}", "unknown_prompt", "prompt_name")
    return fmt, dims, prompts[prompt_name]


def _embedding_response(vectors: np.ndarray, dims: int, fmt: str, model: str, tokens: int) -> dict[str, Any]:
    """OpenAI's embeddings body: ``vectors`` (unit length) cut to ``dims`` and re-normalised, as floats or base64."""
    if dims < vectors.shape[1]:
        vectors = vectors[:, :dims]
        vectors = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    vectors = np.ascontiguousarray(vectors, dtype="<f4")  # base64 carries little-endian float32, as OpenAI's
    if fmt == "base64":
        rows: list[Any] = [base64.b64encode(v.tobytes()).decode("ascii") for v in vectors]
    else:
        rows = vectors.tolist()
    return {
        "object": "list",
        "data": [{"object": "embedding", "index": i, "embedding": row} for i, row in enumerate(rows)],
        "model": model,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }


def _check_supported(data: dict) -> None:
    """Refuse (400 naming the field) what a chat request asks for that this server does not do."""
    for name, nothing in _UNSUPPORTED_CHAT.items():
        value = data.get(name)
        if value not in nothing:  # by ==: logprobs 0 and presence_penalty 0.0 ask for nothing too
            raise ApiError(
                400,
                f"'{name}' is not supported by this server (text chat only: no tools, function calls, logprobs, "
                f"logit_bias, penalties, response formats or audio); leave it out, got {_shown(value)}",
                "unsupported_parameter",
                name,
            )


def _messages_of(data: dict) -> list[dict[str, str]]:
    raw = data.get("messages")
    if not isinstance(raw, list) or not raw:
        raise ApiError(
            400, "'messages' must be a non-empty list of {role, content} objects", "invalid_messages", "messages"
        )
    messages = []
    for i, message in enumerate(raw):
        where = f"messages[{i}]"
        if not isinstance(message, dict):
            raise ApiError(400, f"'{where}' must be an object, got {type(message).__name__}", "invalid_type", where)
        role, content = message.get("role"), message.get("content")
        if role not in _ROLES:
            shown = printable(repr(role))[:80]
            raise ApiError(
                400, f"'{where}.role' must be one of {', '.join(_ROLES)}, got {shown}", "invalid_value", where
            )
        if isinstance(content, list):  # OpenAI's content parts: only text is understood here
            parts = []
            for j, part in enumerate(content):
                if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                    raise ApiError(400, f"'{where}.content' may hold only text parts", "unsupported_content", where)
                parts.append(_unicode(part["text"], f"{where}.content[{j}].text", where))
            content = "".join(parts)
        if not isinstance(content, str):
            raise ApiError(
                400, f"'{where}.content' must be a string, got {type(content).__name__}", "invalid_type", where
            )
        _unicode(content, f"{where}.content", where)
        messages.append({"role": "system" if role == "developer" else role, "content": content})
    return messages


def _sampling_of(data: dict, limits: Limits, prompt_tokens: int, positions: int | None) -> _Sampling:
    max_tokens = _field(data, "max_completion_tokens", (int,), "an integer", None)
    max_tokens = _field(data, "max_tokens", (int,), "an integer", max_tokens)
    if max_tokens is None:
        max_tokens = limits.default_max_tokens
    if not 1 <= max_tokens <= limits.max_new_tokens:
        raise ApiError(
            400,
            f"'max_tokens' must be from 1 to {limits.max_new_tokens}, got {_shown(max_tokens)}",
            "invalid_value",
            "max_tokens",
        )
    if positions is not None and prompt_tokens + max_tokens > positions:
        raise ApiError(
            400,
            f"the prompt ({prompt_tokens} tokens) and max_tokens ({max_tokens}) exceed the model's "
            f"{positions} positions",
            "context_length_exceeded",
            "messages",
        )
    stop = data.get("stop")
    stops = [stop] if isinstance(stop, str) else stop if stop is not None else []
    if not isinstance(stops, list) or len(stops) > 4 or not all(isinstance(s, str) and s for s in stops):
        raise ApiError(400, "'stop' must be a non-empty string or a list of at most 4 of them", "invalid_value", "stop")
    for i, text in enumerate(stops):
        _unicode(text, f"stop[{i}]" if isinstance(stop, list) else "stop", "stop")
    seed = _field(data, "seed", (int,), "an integer", None)
    if seed is not None and not 0 <= seed < 2**63:
        raise ApiError(400, f"'seed' must be from 0 to 2**63 - 1, got {_shown(seed)}", "invalid_value", "seed")
    n = _field(data, "n", (int,), "an integer", 1)
    if n != 1:
        raise ApiError(400, f"'n' must be 1 (one answer per request), got {_shown(n)}", "unsupported_value", "n")
    return _Sampling(
        max_tokens=max_tokens,
        temperature=_number(data, "temperature", 1.0, 0.0, 2.0),
        top_p=_number(data, "top_p", 1.0, 0.0, 1.0, low_open=True),
        stop=tuple(stops),
        seed=seed,
    )


async def _json_body(request: Any, limit: int) -> dict:
    length = request.headers.get("content-length", "")
    if length.isdigit() and int(length) > limit:
        raise ApiError(
            413, f"the request body ({length} bytes) is over this server's {limit} bytes", "request_too_large"
        )
    from starlette.requests import ClientDisconnect

    chunks, size = [], 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise ApiError(413, f"the request body is over this server's {limit} bytes", "request_too_large")
            chunks.append(chunk)
    except ClientDisconnect:
        raise ApiError(499, "the client closed the request", "client_closed_request") from None
    try:
        data = json.loads(b"".join(chunks))
    except (ValueError, RecursionError) as err:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise ApiError(
            400, f"the request body is not valid JSON ({printable(str(err))[:200]})", "invalid_json"
        ) from None
    if not isinstance(data, dict):
        raise ApiError(400, f"the request body must be a JSON object, got {type(data).__name__}", "invalid_json")
    return data


async def _until_done(request: Any, future: asyncio.Future, on_gone: Callable[[], None]) -> Any:
    """``future``'s result; if the client disconnects first, ``on_gone()`` and a 499 error."""

    async def gone() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass

    watcher = asyncio.ensure_future(gone())
    try:
        done, _ = await asyncio.wait({future, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
    if future in done:
        return future.result()
    on_gone()
    future.cancel()
    raise ApiError(499, "the client closed the request", "client_closed_request")


# ---------------------------------------------------------------------------------------------- the app


def _model_id(name_or_path: str) -> str:
    """The model id a server gives by default: the last part of the hub id or folder, ``"model"`` if none."""
    path = Path(name_or_path)
    if name_or_path and path.is_dir():
        path = path.resolve()  # "." is the folder's own name
    return path.name or "model"


def create_app(
    model: torch.nn.Module,
    tokenizer: Any,
    spec: str | Spec,
    *,
    name: str | None = None,
    chat: bool = True,
    prompts: dict[str, str] | None = None,
    api_key: str | None = None,
    limits: Limits | None = None,
    sink_token: str = "auto",
) -> Any:
    """An OpenAI-compatible FastAPI app serving chat and embeddings from ``model``'s one set of weights.

    ``app.state.encoder`` (``EncoderFromDecoder.from_model(model, spec, tokenizer)``) and ``app.state.model``
    are two views of the same tensors.

    Args:
        model: a causal LM (with its head); a bare decoder serves embeddings only (``chat=False``).
        tokenizer: the model's tokenizer; chat needs its chat template.
        spec: the layer spec the embeddings use, e.g. ``"F* | M0B*10"``.
        name: the model id clients send; by default the last part of the model's hub id or folder, else ``"model"``.
        chat: serve ``/v1/chat/completions``.
        prompts: named instructions for embeddings (``{"query": "Instruct: ...\\nQuery: "}``), used only when
            a request names one in ``prompt_name``.
        api_key: if given, every ``/v1`` request needs ``Authorization: Bearer <api_key>``.
        limits: request limits and batching (see :class:`Limits`).
        sink_token: as for :class:`EncoderFromDecoder`.

    Raises:
        ImportError: if FastAPI is not installed (``pip install "nosink[serve]"``).
        ValueError: for a missing tokenizer, chat without an LM head or a chat template, an empty
            ``api_key``, or prompts that are not names mapped to strings.
        SpecError: if the spec does not fit the model.
    """
    try:
        from fastapi import Depends, FastAPI, Request
        from fastapi.exceptions import RequestValidationError
        from fastapi.responses import JSONResponse, StreamingResponse
        from starlette.concurrency import run_in_threadpool
        from starlette.exceptions import HTTPException
    except ImportError as err:
        raise ImportError('serving needs FastAPI and uvicorn: pip install "nosink[serve]"') from err

    limits = limits or Limits()
    if tokenizer is None:
        raise ValueError("the server needs the model's tokenizer")
    check_api_key(api_key)
    prompts = dict(prompts or {})
    for key, text in prompts.items():
        if not isinstance(key, str) or not key or not isinstance(text, str):
            raise ValueError(f"prompts must map names to strings, got {printable(repr(key))}")
    if chat and (getattr(model, "get_output_embeddings", lambda: None)() is None):
        raise ValueError(
            "chat needs a causal LM with its head (AutoModelForCausalLM); pass chat=False to serve embeddings only"
        )
    if chat and not getattr(tokenizer, "chat_template", None):
        raise ValueError("the tokenizer has no chat template: chat needs one (or pass chat=False)")
    encoder = EncoderFromDecoder.from_model(model, spec, tokenizer, sink_token=sink_token)
    sink = encoder.sink_ids()
    name = name or _model_id(encoder.name_or_path)
    positions = getattr(encoder.config, "max_position_embeddings", None)
    worker = _Worker(encoder, model if chat else None, tokenizer, limits)
    started = int(time.time())

    from contextlib import asynccontextmanager

    @asynccontextmanager
    async def lifespan(app: Any) -> AsyncIterator[None]:
        worker.start()
        try:
            yield
        finally:
            await run_in_threadpool(worker.stop)

    app = FastAPI(title="nosink", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    app.state.encoder, app.state.model, app.state.worker, app.state.name = encoder, model, worker, name
    app.state.limits = limits  # the HTTP server's timeouts and connection caps are read from here

    @app.exception_handler(ApiError)
    async def api_error(request: Any, err: ApiError) -> Any:
        return JSONResponse(err.body(), status_code=err.status)

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Any, err: Any) -> Any:
        where = ".".join(str(x) for x in err.errors()[0].get("loc", ())) if err.errors() else "request"
        return JSONResponse(ApiError(400, f"invalid request at {printable(where)}", "invalid_request").body(), 400)

    @app.exception_handler(HTTPException)
    async def http_error(request: Any, err: Any) -> Any:
        code = _HTTP_ERRORS.get(err.status_code, "http_error")
        return JSONResponse(ApiError(err.status_code, str(err.detail), code).body(), status_code=err.status_code)

    @app.exception_handler(Exception)
    async def internal_error(request: Any, err: Exception) -> Any:
        logger.exception("request failed")
        return JSONResponse(ApiError(500, "internal server error", "internal_error", kind="server_error").body(), 500)

    def authorize(request: Request) -> None:
        if api_key is None:
            return
        given = request.headers.get("authorization", "")
        scheme, _, token = given.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), api_key.encode()):
            raise ApiError(401, "a valid API key is required: Authorization: Bearer <key>", "invalid_api_key")

    def check_model(data: dict) -> str:
        asked = data.get("model")
        if not isinstance(asked, str):
            raise ApiError(400, "'model' is required: a string", "invalid_type", "model")
        if asked != name:
            raise ApiError(
                404,
                f"model {printable(repr(asked))[:200]} is not served here; this server serves {name!r}",
                "model_not_found",
                "model",
            )
        return asked

    @app.get("/health")
    async def health() -> Any:
        return {"status": "ok", "waiting": worker.busy(), **worker.stats}

    @app.get("/v1/models", dependencies=[Depends(authorize)])
    async def models() -> Any:
        card = {
            "id": name,
            "object": "model",
            "created": started,
            "owned_by": "nosink",
            "spec": str(encoder.spec),
            "chat": chat,
            "dimensions": encoder.config.hidden_size,
            "prompts": sorted(prompts),
        }
        return {"object": "list", "data": [card]}

    @app.post("/v1/embeddings", dependencies=[Depends(authorize)])
    async def embeddings(request: Request) -> Any:
        data = await _json_body(request, limits.max_body_bytes)
        model_name = check_model(data)
        texts = _texts_of(data, limits.max_inputs)
        fmt, dims, instruction = _embedding_options(data, encoder.config.hidden_size, prompts)
        # Tokenized once: the tokens counted against the limit here are the tokens the worker runs.
        try:
            tokens = await run_in_threadpool(_texts.tokenize, tokenizer, texts, instruction, sink=sink)
        except (TypeError, ValueError) as err:
            raise ApiError(400, printable(str(err)), "invalid_input", "input") from None
        lengths = tokens.lengths
        over = [i for i, n in enumerate(lengths) if n > limits.max_tokens_per_text]
        if over:
            i = over[0]
            raise ApiError(
                400,
                f"input[{i}] has {lengths[i]} tokens (with the sink token and prompt); this server takes at "
                f"most {limits.max_tokens_per_text} per text ({len(over)} of {len(texts)} inputs are over)",
                "context_length_exceeded",
                "input",
            )
        if tokens.empty:
            raise ApiError(400, f"input[{tokens.empty[0]}] has no tokens: nothing to embed", "empty_input", "input")
        job = _EmbedJob(tokens)
        worker.submit(job)

        def forget() -> None:
            job.cancelled = True

        vectors = await _until_done(request, asyncio.wrap_future(job.future), forget)
        return JSONResponse(_embedding_response(vectors, dims, fmt, model_name, sum(lengths)))

    @app.post("/v1/chat/completions", dependencies=[Depends(authorize)])
    async def chat_completions(request: Request) -> Any:
        data = await _json_body(request, limits.max_body_bytes)
        if not chat:
            raise ApiError(404, "this server serves embeddings only (started without chat)", "chat_disabled")
        model_name = check_model(data)
        _check_supported(data)
        messages = _messages_of(data)
        stream = _field(data, "stream", (bool,), "true or false", False)
        options = _field(data, "stream_options", (dict,), "an object", {})
        include_usage = options.get("include_usage") is True

        def render() -> list[int]:
            text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
            return list(tokenizer(text, add_special_tokens=False)["input_ids"])

        try:
            prompt_ids = await run_in_threadpool(render)
        except Exception as err:  # the template's own refusals (jinja exceptions): the messages do not fit it
            raise ApiError(
                400,
                f"the chat template refused these messages: {printable(str(err))[:300]}",
                "invalid_messages",
                "messages",
            ) from None
        if len(prompt_ids) > limits.max_prompt_tokens:
            raise ApiError(
                400,
                f"the prompt has {len(prompt_ids)} tokens; this server takes at most {limits.max_prompt_tokens}",
                "context_length_exceeded",
                "messages",
            )
        sampling = _sampling_of(data, limits, len(prompt_ids), positions)
        loop = asyncio.get_running_loop()
        events: asyncio.Queue = asyncio.Queue()
        job = _ChatJob(prompt_ids, sampling, lambda event: loop.call_soon_threadsafe(events.put_nowait, event))
        worker.submit(job)
        ident, created = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())

        def usage(completion: int) -> dict[str, int]:
            return {
                "prompt_tokens": len(prompt_ids),
                "completion_tokens": completion,
                "total_tokens": len(prompt_ids) + completion,
            }

        if not stream:
            parts: list[str] = []
            while True:
                event = await _until_done(
                    request, asyncio.ensure_future(events.get()), lambda: setattr(job, "cancelled", True)
                )
                if event[0] == "delta":
                    parts.append(event[1])
                elif event[0] == "error":
                    raise ApiError(500, event[1], "generation_failed", kind="server_error")
                else:
                    break
            message = {"role": "assistant", "content": "".join(parts)}
            return JSONResponse(
                {
                    "id": ident,
                    "object": "chat.completion",
                    "created": created,
                    "model": model_name,
                    "choices": [{"index": 0, "message": message, "finish_reason": event[1], "logprobs": None}],
                    "usage": usage(event[2]),
                }
            )

        def chunk(delta: dict, finish: str | None = None) -> str:
            body = {
                "id": ident,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model_name,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
            }
            if include_usage:
                body["usage"] = None
            return f"data: {json.dumps(body)}\n\n"

        async def sse() -> AsyncIterator[str]:
            try:
                yield chunk({"role": "assistant", "content": ""})
                while True:
                    event = await events.get()
                    if event[0] == "delta":
                        yield chunk({"content": event[1]})
                    elif event[0] == "error":
                        error = ApiError(500, event[1], "generation_failed", kind="server_error")
                        yield f"data: {json.dumps(error.body())}\n\n"
                        return
                    else:
                        yield chunk({}, event[1])
                        if include_usage:
                            tail = {
                                "id": ident,
                                "object": "chat.completion.chunk",
                                "created": created,
                                "model": model_name,
                                "choices": [],
                                "usage": usage(event[2]),
                            }
                            yield f"data: {json.dumps(tail)}\n\n"
                        yield "data: [DONE]\n\n"
                        return
            finally:
                job.cancelled = True  # a no-op once done; stops the generation if the client went away

        return StreamingResponse(sse(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"})

    return app


# ---------------------------------------------------------------------------------------------- running it


def bind(host: str = "127.0.0.1", port: int = 8000) -> list[socket.socket]:
    """Sockets bound to ``host:port`` now, to serve on later with :func:`run` or :class:`ServerThread`.

    Bound before a model loads, so a taken port fails at once and nothing takes it in between. Every
    address ``host`` names is bound (``"localhost"``: IPv4 and IPv6; ``""``: all interfaces). Close the
    sockets if they are not served.

    Args:
        host: the address to bind (``127.0.0.1``: this machine only).
        port: the port; 0 picks a free one.

    Raises:
        ValueError: for a port that is not an integer from 0 to 65535.
        OSError: ``cannot listen on HOST:PORT: ...`` with the system's reason.
    """
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise ValueError(f"the port must be an integer from 0 to 65535, got {printable(repr(port))}")
    where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    sockets: list[socket.socket] = []
    try:
        found = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        for family, kind, proto, _, address in dict.fromkeys(found):  # without repeats, in order
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            if os.name == "posix":  # as asyncio binds for uvicorn: a port in TIME_WAIT can be taken again
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:  # IPv6 and IPv4 sockets side by side on one port
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            if port == 0 and len(sockets) > 1:  # every address on the port the system picked for the first
                address = (address[0], sockets[0].getsockname()[1], *address[2:])
            sock.bind(address)
    except OSError as err:
        for sock in sockets:
            sock.close()
        raise OSError(f"cannot listen on {printable(where)}: {printable(str(err))}") from err
    return sockets


def _refusal(status: int, reason: str, error: ApiError) -> bytes:
    """A whole HTTP/1.1 answer with ``error``'s JSON body that closes the connection, written outside the parser."""
    body = json.dumps(error.body()).encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n"
        "connection: close\r\n\r\n"
    )
    return head.encode() + body


def _guarded(base: type, limits: Limits) -> type:
    """uvicorn's HTTP protocol class ``base`` with time limits on slow requests and caps on open connections.

    uvicorn times out only idle keep-alive connections, so a client that stops mid-request would hold its
    connection forever. A late request is answered 408 (headers: ``limits.header_timeout_s`` from the
    connection or the request's first byte; body: ``limits.body_timeout_s`` from the headers), and a
    connection beyond the caps 503; both are closed. Headers are complete when uvicorn starts a request
    cycle (``self.cycle``), in both its h11 and httptools protocols. The counts belong to the class: build
    one class per server.
    """
    open_per_client: dict[str, int] = {}
    open_connections = [0]

    class Guarded(base):  # type: ignore[valid-type, misc]
        _peer: str | None = None  # set once the connection is counted
        _timer: asyncio.TimerHandle | None = None
        _timed: Any = None  # the request cycle whose body is timed
        _headers_due = False  # a request's headers are being waited for, under the header timeout

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            super().connection_made(transport)
            peer = self.client[0] if self.client else ""
            if open_connections[0] >= limits.max_connections:
                self._refuse(f"the server has {limits.max_connections} open connections, its limit")
            elif open_per_client.get(peer, 0) >= limits.max_connections_per_client:
                self._refuse(f"{limits.max_connections_per_client} connections from {peer} are open, the limit")
            else:
                self._peer = peer
                open_per_client[peer] = open_per_client.get(peer, 0) + 1
                open_connections[0] += 1
                self._headers_due = True
                self._arm(limits.header_timeout_s)

        def _refuse(self, why: str) -> None:
            error = ApiError(503, f"{why}; retry later", "too_many_connections", kind="server_error")
            self.transport.write(_refusal(503, "Service Unavailable", error))
            self.transport.close()

        def send_400_response(self, msg: str) -> None:
            # A request uvicorn's parser refuses: its answer, with OpenAI's JSON error body.
            error = ApiError(400, f"malformed HTTP request ({msg.rstrip('.')})", "invalid_http_request")
            self.transport.write(_refusal(400, "Bad Request", error))
            self.transport.close()

        def connection_lost(self, exc: Exception | None) -> None:
            self._arm(None)
            if self._peer is not None:
                open_connections[0] -= 1
                open_per_client[self._peer] -= 1
                if not open_per_client[self._peer]:
                    del open_per_client[self._peer]
                self._peer = None
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            if not self._headers_due and (self.cycle is None or self.cycle.response_complete):
                self._headers_due = True  # the first bytes of the next request
                self._arm(limits.header_timeout_s)
            super().data_received(data)
            cycle = self.cycle
            if cycle is not None and cycle is not self._timed:  # a request's headers are complete
                self._timed, self._headers_due = cycle, False
                self._arm(limits.body_timeout_s if cycle.more_body else None)
            elif cycle is not None and not cycle.more_body and not self._headers_due:
                self._arm(None)  # its body is complete

        def _arm(self, seconds: float | None) -> None:
            if self._timer is not None:
                self._timer.cancel()
            self._timer = None if seconds is None else self.loop.call_later(seconds, self._late)

        def _late(self) -> None:
            self._timer = None
            if self.transport.is_closing():
                return
            cycle = self.cycle
            body = cycle is not None and cycle is self._timed and not self._headers_due
            if not (body and cycle.response_started):  # nothing answered yet: say why it is closed
                part, seconds = ("body", limits.body_timeout_s) if body else ("headers", limits.header_timeout_s)
                error = ApiError(408, f"the request's {part} did not arrive within {seconds:g} s", "request_timeout")
                self.transport.write(_refusal(408, "Request Timeout", error))
            if body and not cycle.response_complete:  # the app's handler sees a disconnect; its answer goes nowhere
                cycle.disconnected = True
                cycle.message_event.set()
            self.transport.close()

    Guarded.__name__ = Guarded.__qualname__ = f"Guarded{base.__name__}"
    return Guarded


def _url(host: str, sockets: Sequence[socket.socket]) -> str:
    """``http://host:port`` of the bound sockets (IPv6 hosts in brackets)."""
    port = sockets[0].getsockname()[1]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


class _HeldBack(logging.Filter):
    """Holds back uvicorn's log records from one thread while its server starts.

    A failed start becomes one exception with the errors' messages (uvicorn logs them and exits);
    :meth:`release` logs the records once the server has started.
    """

    def __init__(self, logger: logging.Logger) -> None:
        super().__init__()
        self.logger, self.thread = logger, threading.get_ident()
        self.records: list[logging.LogRecord] = []
        logger.addFilter(self)

    def filter(self, record: logging.LogRecord) -> bool:
        if record.thread != self.thread:
            return True
        self.records.append(record)
        return False

    def errors(self) -> list[str]:
        """The last line of each error record held (a traceback's last line is its exception)."""
        lines = [[x.strip() for x in r.getMessage().splitlines() if x.strip()] for r in self.records]
        return [text[-1] for text, r in zip(lines, self.records, strict=True) if text and r.levelno >= logging.ERROR]

    def release(self, show: bool) -> None:
        """Stop holding records back, logging those held if ``show``."""
        self.logger.removeFilter(self)
        held, self.records = self.records, []
        for record in held if show else ():
            self.logger.handle(record)


def _server(
    app: Any, host: str, sockets: list[socket.socket], log_level: str, on_started: Callable[[str], None] | None
) -> Any:
    """A uvicorn server of ``app`` on the bound ``sockets``.

    Its ``serve_until_stopped()`` calls ``on_started(url)`` once serving, raises OSError for a failed
    start, and closes the sockets when the server stops.
    """
    import uvicorn
    from uvicorn.protocols.http.auto import AutoHTTPProtocol

    url = _url(host, sockets)
    limits = getattr(getattr(app, "state", None), "limits", None) or Limits()

    class Server(uvicorn.Server):
        held: _HeldBack | None = None

        def serve_until_stopped(self) -> None:
            self.held = _HeldBack(logging.getLogger("uvicorn.error"))  # in the thread that runs the server
            try:
                self.run(sockets=sockets)
            except SystemExit as exit:
                if self.started:
                    raise
                reason = "; ".join(self.held.errors()) or f"uvicorn exited with status {exit.code}"
                raise OSError(f"the server did not start: {printable(reason)}") from None
            finally:
                self.held.release(show=False)  # a no-op once started
                for sock in sockets:
                    sock.close()

        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            try:
                await super().startup(sockets=sockets)
            finally:
                if self.held is not None and self.started:
                    self.held.release(show=True)  # uvicorn's start-up lines, then its log as usual
            if self.started and on_started is not None:
                on_started(url)

    port = sockets[0].getsockname()[1]
    # No WebSockets: an upgraded connection would leave the guarded protocol (and its counts).
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=log_level,
        timeout_graceful_shutdown=10,
        http=_guarded(AutoHTTPProtocol, limits),
        ws="none",
    )
    return Server(config)


def run(
    app: Any,
    host: str = "127.0.0.1",
    port: int = 8000,
    log_level: str = "info",
    *,
    sockets: list[socket.socket] | None = None,
    on_started: Callable[[str], None] | None = None,
) -> None:
    """Serve ``app`` with uvicorn until interrupted (binds to localhost unless told otherwise).

    On Ctrl-C, open streams get 10 s to finish before they are cut.

    Args:
        app: the app from :func:`create_app`.
        host: the address to serve on.
        port: the port.
        log_level: uvicorn's log level.
        sockets: sockets already bound to ``host:port`` by :func:`bind`, else bound here; closed when the
            server stops.
        on_started: called with the server's URL (``http://host:port``) once it accepts connections.

    Raises:
        ImportError: if uvicorn is not installed.
        ValueError: for a port that is not an integer from 0 to 65535.
        OSError: if ``host:port`` cannot be bound, or the server does not start (one message).
    """
    sockets = bind(host, port) if sockets is None else sockets
    try:
        server = _server(app, host, sockets, log_level, on_started)
    except BaseException:
        for sock in sockets:
            sock.close()
        raise
    server.serve_until_stopped()
    if not server.started:  # stopped before it started (uvicorn.run exits with status 3 here)
        raise OSError("the server did not start")


class ServerThread:
    """``app`` served by uvicorn in a background thread, for notebooks, tests and benchmarks.

    ``with ServerThread(app) as server:`` serves until the block ends; ``server.url + "/v1"`` is the
    ``base_url`` of an ``openai.OpenAI`` client.

    Args:
        app: the app from :func:`create_app`.
        host: the address to bind.
        port: the port; 0 picks a free one (see :attr:`port`).
    """

    def __init__(self, app: Any, host: str = "127.0.0.1", port: int = 0) -> None:
        self.app, self.host, self._port = app, host, port
        self.server: Any = None
        self.thread: threading.Thread | None = None
        self._started = threading.Event()
        self._error: BaseException | None = None
        self._sockets: list[socket.socket] = []

    @property
    def port(self) -> int:
        """The port the server listens on (the one asked for until it is started)."""
        return int(self._sockets[0].getsockname()[1]) if self._sockets else self._port

    @property
    def url(self) -> str:
        """``http://host:port``."""
        return f"http://[{self.host}]:{self.port}" if ":" in self.host else f"http://{self.host}:{self.port}"

    def start(self, timeout: float = 60.0) -> "ServerThread":
        """Start serving; returns once the server accepts connections.

        Raises:
            OSError: if the address cannot be bound, or the server does not start (uvicorn's message).
            RuntimeError: if the server does not start within ``timeout`` seconds.
        """
        self._sockets = bind(self.host, self._port)
        self.server = _server(self.app, self.host, self._sockets, "warning", lambda url: self._started.set())

        def serve() -> None:
            try:
                self.server.serve_until_stopped()
            except BaseException as err:  # handed to start()
                self._error = err
            finally:
                self._started.set()  # start() waits for this or for the server to start

        self.thread = threading.Thread(target=serve, name="nosink-server", daemon=True)
        self.thread.start()
        if not self._started.wait(timeout):
            self.stop()
            raise RuntimeError(f"the server did not start within {timeout:g} s")
        if self._error is not None:
            raise self._error
        return self

    def stop(self) -> None:
        """Stop serving and wait for the server (and its model worker) to finish."""
        if self.server is not None:
            self.server.should_exit = True
        if self.thread is not None:
            self.thread.join(timeout=60)

    def __enter__(self) -> "ServerThread":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
