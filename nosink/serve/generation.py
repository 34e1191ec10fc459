"""Chat generation: the chats being decoded, a token at a time, with sampling and stop strings.

Touched by the engine's thread only; each chat's events (``("delta", text)``, ``("done", finish,
completion_tokens)``, ``("error", message)``) go to its request through the job's ``emit``.
"""

import logging
import time
from collections.abc import Sequence
from typing import Any

import torch

from nosink.checks import printable
from nosink.serve.jobs import ChatJob, Sampling

logger = logging.getLogger(__name__)


class Chats:
    """The chats waiting and being decoded (at most ``max_active`` side by side)."""

    def __init__(self, lm: torch.nn.Module | None, tokenizer: Any, max_active: int, stats: dict[str, int]) -> None:
        self.lm, self.tokenizer, self.max_active, self.stats = lm, tokenizer, max_active, stats
        self.waiting: list[ChatJob] = []
        self.active: list[ChatJob] = []
        eos = getattr(getattr(lm, "generation_config", None), "eos_token_id", None) if lm is not None else None
        eos = eos if eos is not None else tokenizer.eos_token_id
        self.eos = set(eos if isinstance(eos, (list, tuple)) else [eos]) - {None}

    def __len__(self) -> int:
        return len(self.waiting) + len(self.active)

    def add(self, chat: ChatJob) -> None:
        """Queue a chat; it starts when fewer than ``max_active`` are being decoded."""
        self.waiting.append(chat)

    def jobs(self) -> list[ChatJob]:
        """Every chat not finished yet."""
        return self.waiting + self.active

    def run(self, seconds: float) -> None:
        """Decode for about ``seconds`` (at least one token of each active chat)."""
        while self.waiting and len(self.active) < self.max_active:
            self.active.append(self.waiting.pop(0))
        start = time.perf_counter()
        while self.active:
            for chat in list(self.active):
                self._step(chat)
            if time.perf_counter() - start >= seconds:
                break

    def _step(self, chat: ChatJob) -> None:
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
            token = sample(out.logits[0, -1].float().cpu(), chat.sampling, chat.generator)  # logits: (1, 1, V)
        except Exception as err:
            logger.exception("chat generation failed")
            self.active.remove(chat)
            emit(chat, ("error", f"generation failed: {printable(str(err))}"))
            return
        self.stats["chat_tokens"] += 1
        finish = None
        if token in self.eos:
            finish = "stop"
        else:
            chat.ids.append(token)
        text = self.tokenizer.decode(chat.ids, skip_special_tokens=True)
        end, hit = visible(text, chat.sampling.stop)
        if hit:
            finish = "stop"
        elif finish is None and len(chat.ids) >= chat.sampling.max_tokens:
            finish = "length"
        if finish is not None:
            end = end if hit else len(text)
        if end > chat.sent:
            emit(chat, ("delta", text[chat.sent : end]))
            chat.sent = end
        if finish is not None:
            self.active.remove(chat)
            chat.cache = None  # free the KV cache now, not when the request's coroutine lets go
            emit(chat, ("done", finish, len(chat.ids) + (token in self.eos)))


def emit(chat: ChatJob, event: tuple) -> None:
    """Hand ``event`` to the chat's request; a chat whose event loop is gone is cancelled."""
    try:
        chat.emit(event)
    except RuntimeError:  # the event loop is closed: nobody is listening any more
        chat.cancelled = True


def sample(logits: torch.Tensor, sampling: Sampling, generator: torch.Generator | None) -> int:
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


def visible(text: str, stops: Sequence[str]) -> tuple[int, bool]:
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
