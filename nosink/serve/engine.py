"""The engine: the one thread that runs the model, taking embedding batches and chat steps in turns.

The encoder and the LM share every layer, so their forward passes never interleave. The engine runs one
unit of work at a time: an embedding batch, or a chat step (a token of every active chat in one forward,
and the prefill of chats that start). Which one comes next is a time balance: with ``s`` the chats' share
(:attr:`Limits.chat_share`, 0.5 by default), ``lead`` counts ``(1 - s)`` x the chats' seconds less ``s`` x the
embeddings' while both had work. An embedding batch runs when one is due and the chats are not behind
(``lead >= 0``); otherwise a chat step runs. So under both loads the chats get about ``s`` of the model's time,
the embeddings the rest, and neither starves: with ``s = 0.5`` a 100 ms batch is followed by about 100 ms of
chat steps, a long prefill by embedding batches until they have had as long; with ``s = 0.25`` by about 33 ms
of chat steps. When either side has nothing to do, ``lead`` goes back to 0: time used alone is not owed back.

With ``chat_riding=True`` (experimental, off by default) the chats need not take turns: an embedding batch that
is due carries the chats' next tokens in its own forward (a :class:`~nosink.models.riding.Rider`: one token a chat
at the end of the batch's packed stream, attending its chat's KV cache), so one pass gives the batch its vectors
and every chat a token, and the balance above is left as it was. That needs the batch's plan to walk every layer
once (no early exit, repeated layers, Token Prepending or sliding windows), a packed batch on the fast path (a GPU),
no LoRA adapters (chats run the base model) and rotary frequencies that do not follow the batch's longest position
(:meth:`EncoderFromDecoder.rides`); elsewhere, and for a batch whose rider fails, the two take turns. It is off by
default because it measured slower where it was meant to help: on an H200 one riding unit took 0.72-1.01x the time
of a batch and a chat step in turns, but under the served mixed load, warmed up, the embeddings got 0.76x and the
chats 1.08x of what taking turns gave them on the Qwen2.5-0.5B shape (``benchmarks/results/serve-gpu-14/``: a
riding batch needs CUDA graphs of its own, and the load's many batch shapes keep it capturing them).
And a chat that rides gets one token a batch: where batches take longer than two chat steps, it gets less than
half its speed alone.

On a GPU an embedding batch is answered after the next one is launched (see :mod:`nosink.serve.embedding`):
both are queued on the model's one stream, so their passes still run one after the other, while the host
builds one and answers the other. A batch in flight is answered before a chat step runs.

With ``chat_stream=True`` (experimental, off by default; on a GPU) the chats' steps run on a CUDA stream of their
own, beside the embedding batch in flight instead of after it: both are CUDA graphs of small kernels for a few
rows, which leave most of the card idle (``benchmarks/results/serve-gpu-14/``: taking turns, about half of the
GPU's time under the mixed load went to chat steps). Measured on an H200 it was slower than taking turns (a chat
step beside a batch took 5.2 ms instead of 3.5, and the embeddings got half: ``benchmarks/results/serve-gpu-15/``).
The balance above is kept; a batch in flight is answered
after the chat step that ran beside it (its time counted as the embeddings'). Not with ``chat_riding`` (a riding
batch reads the chats' cache), nor for rotary frequencies that follow the batch's longest position (transformers'
dynamic and longrope types rewrite the rotary module's frequencies in each forward): there the two share the
model's stream.
"""

import concurrent.futures
import contextlib
import logging
import queue
import threading
import time
from collections.abc import Mapping

import torch

from nosink.layerspec import Plan
from nosink.models import EncoderFromDecoder
from nosink.models.adapters import adapter_layers, adapters_off
from nosink.serve.embedding import Batches
from nosink.serve.generation import Chats, emit
from nosink.serve.jobs import ChatJob, EmbedJob
from nosink.serve.limits import ApiError, Limits

logger = logging.getLogger(__name__)

_STOP = object()
FAILURES = 3  # unexpected errors in a row after which the engine fails the requests it holds (see Engine._loop)
_sleep = time.sleep  # bound at import: tests replace this module's `time` with a clock of their own


class Inbox:
    """What other threads hand the engine (jobs, and the request to stop), taken by the engine's thread."""

    def __init__(self) -> None:
        self.queue: queue.Queue = queue.Queue()

    def __len__(self) -> int:
        return self.queue.qsize()

    def put(self, item: object) -> None:
        """Hand ``item`` to the engine (from any thread)."""
        self.queue.put(item)

    def take(self, timeout: float | None) -> list:
        """Everything handed over so far, waiting up to ``timeout`` seconds (None: for ever) for a first item."""
        items = []
        try:
            items.append(self.queue.get(timeout=timeout) if timeout != 0.0 else self.queue.get_nowait())
            while True:
                items.append(self.queue.get_nowait())
        except queue.Empty:
            pass
        return items

    def flush(self) -> None:
        """Send what answers are held back (an inbox that answers other processes batches them; see PipeInbox)."""


class Engine:
    """Runs the model for every request: :meth:`submit` from any thread, the work in the engine's own thread.

    Args:
        encoder: the encoder whose spec the embeddings use.
        lm: the causal LM that chats (its layers are the encoder's); None for embeddings only.
        tokenizer: the model's tokenizer (decodes chat answers).
        limits: the batch sizes, waits and queue length (see :class:`Limits`).
        plans: the embedding configurations' plans by name, compiled once (:meth:`EncoderFromDecoder.plan_for`);
            an :class:`EmbedJob` names one in ``config`` (or none, for the encoder's own spec).
        chat_riding: chat steps ride embedding batches where they can (experimental; see the module docstring);
            ``False`` (the default): the two always take turns.
        chat_stream: on a GPU, chat steps run on a CUDA stream of their own, beside the embedding batch in flight
            (experimental; see the module docstring); no effect elsewhere.
        chat_compile: chat decode steps run through ``torch.compile`` (experimental; see :mod:`nosink.serve.kv`):
            fewer, fused kernels a step, compiled (minutes on a GPU) when the engine starts.

    Raises:
        ValueError: for both ``chat_riding`` and ``chat_stream``.
    """

    def __init__(
        self,
        encoder: EncoderFromDecoder,
        lm: torch.nn.Module | None,
        tokenizer: object,
        limits: Limits,
        plans: Mapping[str, Plan] | None = None,
        chat_riding: bool = False,
        chat_stream: bool = False,
        chat_compile: bool = False,
    ) -> None:
        if chat_riding and chat_stream:
            raise ValueError("chat_riding and chat_stream exclude each other (a riding batch reads the chats' cache)")
        self.encoder, self.lm, self.tokenizer, self.limits = encoder, lm, tokenizer, limits
        self.inbox: Inbox = Inbox()  # another process's front-ends hand their jobs through a PipeInbox
        # busy_ms: the engine's time in embedding batches and chat steps (against the wall clock: how loaded it is)
        # embedding_request_ms: answered embedding requests' time in the engine, gathering and batch (see Batches);
        # embedding_ms and chat_ms: busy_ms split between embedding batches and chat steps (chat_steps of them);
        # ridden_steps: chat steps that rode an embedding batch (counted in chat_steps, their time in embedding_ms)
        self.stats = {"embedding_batches": 0, "embedded_texts": 0, "chat_tokens": 0, "dropped": 0, "busy_ms": 0}
        self.stats.update(embedding_requests=0, embedding_request_ms=0, embedding_ms=0, chat_steps=0, chat_ms=0)
        self.stats.update(ridden_steps=0)
        self.plans = dict(plans or {})
        self.chat_compile = chat_compile
        self.batches, self.chats = self._new_work()
        # A fine-tuned encoder's LoRA layers wrap the LM's own layers: chat steps run with them off (the base model).
        self.adapters = adapter_layers(lm)
        self.riding = chat_riding and lm is not None and not self.adapters
        # The chats' own CUDA stream (None: they share the model's stream with the embedding batches). Not where the
        # rotary frequencies follow the batch's longest position: both sides would write the one rotary module's
        # frequencies (transformers' dynamic and longrope types), with nothing ordering the two streams.
        own = chat_stream and lm is not None and not encoder.parts.batch_wide_rotary
        self.chat_stream = _own_stream(lm) if own else None
        self.thread = threading.Thread(target=self._loop, name="nosink-model", daemon=True)

    # -- called from other threads

    def start(self) -> None:
        """Compile the layer loop that the encoder's CUDA graphs capture (:meth:`EncoderFromDecoder.warm_up`: on a GPU,
        10-16 s once; a server's work repays it) and, with ``chat_compile``, the chats' decode steps (minutes,
        with any LoRA adapter off, as chat runs), then start the engine's thread. Once started, nothing more."""
        if self.thread.ident is not None:
            return
        self.encoder.warm_up()
        with torch.inference_mode(), adapters_off(self.adapters):
            self.chats.warm_up()
        self.thread.start()

    def stop(self) -> None:
        """Fail what is still waiting and stop the engine's thread (waits up to 30 s), if it was started."""
        self.inbox.put(_STOP)
        if self.thread.ident is not None:
            self.thread.join(timeout=30)

    def busy(self) -> int:
        """Requests queued or being worked on."""
        return len(self.inbox) + len(self.batches) + len(self.chats)

    def health(self) -> dict[str, int]:
        """Requests waiting, the counts of work done and the CUDA graphs (the encoder's, the chats'): what ``/health``
        shows."""
        return {"waiting": self.busy(), **self.stats, **self.encoder.graph_counts(), **self.chats.graph_counts()}

    def submit(self, job: EmbedJob | ChatJob) -> None:
        """Queue a request.

        Raises:
            ApiError: as :meth:`check`.
        """
        self.check(job)
        self.inbox.put(job)

    def check(self, job: EmbedJob | ChatJob) -> None:
        """Refuse a job the engine cannot take.

        Raises:
            ApiError: 404 for an embedding job naming a configuration the engine lacks, 503 if
                ``limits.max_queue`` requests are already waiting.
        """
        if isinstance(job, EmbedJob) and job.config is not None and job.config not in self.batches.plans:
            raise ApiError(404, f"no embedding configuration {job.config!r} here", "model_not_found", "model")
        if self.busy() >= self.limits.max_queue:
            raise ApiError(503, "the server is overloaded; retry later", "server_overloaded", kind="server_error")

    def cancel(self, job: EmbedJob | ChatJob) -> None:
        """Stop work on a request whose client is gone (a no-op once it is done)."""
        job.cancelled = True

    # -- the engine's thread

    def _loop(self) -> None:
        # A request's own failure is handled where it happens (its batch or chat step is retried request by request).
        # An error that escapes to here is the engine's own: it is logged, the engine waits a little longer after each
        # one in a row, and after FAILURES in a row it fails every request it holds and starts its lists afresh, so a
        # fault that repeats can neither spin the thread nor leave clients waiting for ever.
        lead = 0.0  # the chats' weighted seconds beyond the embeddings' (negative: behind); see the module docstring
        share = self.limits.chat_share
        failures = 0  # unexpected errors in a row
        with torch.inference_mode():
            while True:
                try:
                    if not self._take():
                        break
                    chatting = len(self.chats) > 0
                    both = chatting and len(self.batches) > 0  # the balance counts only while both have work
                    lead = lead if both else 0.0
                    start, answered = time.perf_counter(), 0.0
                    rider = self.chats.rider() if chatting and self.riding and self.batches.due() else None
                    if rider is not None:  # one pass: the batch, and a token of every chat (see the docstring)
                        self.batches.step(rider)
                        self.chats.ridden(rider)  # a rider the batch could not carry runs its step alone here
                        self.stats["chat_steps"] += 1
                        self.stats["ridden_steps"] += rider.logits is not None
                        weight, kind = 0.0, "embedding_ms"  # both sides moved: neither owes the other
                    elif self.batches.due() and (lead >= 0 or not chatting):
                        self.batches.step()  # launches a batch, answers the one in flight before it
                        weight, kind = -share, "embedding_ms"
                    elif chatting and self.chat_stream is not None:  # beside the batch in flight, if any
                        try:
                            with adapters_off(self.adapters), self._on_chat_stream():
                                self.chats.step()
                        finally:  # the batch in flight ran beside the step: answer it now, even if the step failed
                            answering = time.perf_counter()
                            self.batches.finish()
                            answered = time.perf_counter() - answering  # the embeddings' time, not the chats'
                        weight, kind = 1.0 - share, "chat_ms"
                        self.stats["chat_steps"] += 1
                    elif self.batches.in_flight is not None:
                        self.batches.finish()  # nothing to launch behind it: answer it now
                        weight, kind = -share, "embedding_ms"
                    elif chatting:
                        with adapters_off(self.adapters):
                            self.chats.step()
                        weight, kind = 1.0 - share, "chat_ms"
                        self.stats["chat_steps"] += 1
                    else:
                        continue
                    took = time.perf_counter() - start - answered
                    self._spent(took, kind)
                    self._spent(answered, "embedding_ms")
                    if both:
                        lead += weight * took - share * answered
                    failures = 0
                except Exception as err:  # the engine must outlive any one request
                    failures += 1
                    logger.exception("model engine: unexpected error %d in a row (the engine goes on)", failures)
                    if failures >= FAILURES:
                        self._reset(err)
                        failures, lead = 0, 0.0
                    _sleep(min(0.01 * 2 ** (failures - 1), 1.0) if failures else 0.0)

    def _spent(self, seconds: float, kind: str) -> None:
        """Count ``seconds`` of the engine's time, spent on ``kind`` (``embedding_ms`` or ``chat_ms``)."""
        self.stats["busy_ms"] += round(seconds * 1000)
        self.stats[kind] += round(seconds * 1000)

    def _on_chat_stream(self) -> contextlib.AbstractContextManager:
        """The context in which a chat step runs on the chats' own stream."""
        return torch.cuda.stream(self.chat_stream)

    def _reset(self, err: Exception) -> None:
        """Fail every request the engine holds (their work keeps failing) and start its work lists afresh."""
        message = f"the model engine failed ({type(err).__name__}); retry later"
        for job in self.batches.jobs():
            try:
                job.future.set_exception(RuntimeError(message))
            except concurrent.futures.InvalidStateError:  # answered or cancelled already
                pass
        for chat in self.chats.jobs():
            emit(chat, ("error", message))
        self.batches, self.chats = self._new_work()
        logger.error("model engine: %d errors in a row; every request it held has failed", FAILURES)

    def _new_work(self) -> tuple[Batches, Chats]:
        """Empty lists of embedding batches and chats (at the start, and after :meth:`_reset`)."""
        return (
            Batches(self.encoder, self.limits, self.stats, self.plans),
            Chats(self.lm, self.tokenizer, self.limits.max_active_chats, self.stats, self.chat_compile),
        )

    def _take(self) -> bool:
        """Move what is in the inbox into the engine's lists; False once asked to stop."""
        timeout = 0.0 if len(self.chats) else self.batches.wait()
        for item in self.inbox.take(timeout):
            if item is _STOP:
                self.batches.finish()  # its work is done or nearly: answer it
                for job in self.batches.jobs():
                    if not job.future.cancel() and not job.future.done():  # already running
                        job.future.set_exception(RuntimeError("the server is shutting down"))
                for chat in self.chats.jobs():
                    emit(chat, ("error", "the server is shutting down"))
                self.inbox.flush()
                return False
            if isinstance(item, EmbedJob):
                self.batches.add(item)
            else:
                self.chats.add(item)
        return True


def _own_stream(lm: torch.nn.Module) -> torch.cuda.Stream | None:
    """A CUDA stream of its own for ``lm``'s device, if that is a GPU; else None.

    Of high priority: torch hands out those from a pool apart from the default-priority streams on which CUDA
    graphs are captured (which could otherwise be this very stream, making chat steps wait for a capture's
    batch), and the GPU then favours the chats' small kernels.
    """
    device = next(lm.parameters()).device
    return torch.cuda.Stream(device, priority=-1) if device.type == "cuda" else None
