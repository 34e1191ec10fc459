"""Chat generation: the chats being decoded, every one a token per step, with sampling and stop strings.

Continuous batching: one :meth:`Chats.step` runs one forward that advances every active chat by a token (their
KV caches are rows of fixed buffers, the step a CUDA graph on a GPU: see :mod:`nosink.serve.kv`), then drops
the chats that finished or were cancelled, then starts the waiting chats that fit under ``max_active`` with
one forward over their prompts, whose first tokens they get at once. A forward that fails is retried chat by
chat, so only the chats at fault fail. Each chat samples from its own row with its own generator, so a
``seed`` gives the same answer whatever else is running, and its answer is detokenized incrementally
(:class:`Detokenizer`), not decoded again from its first token at every step.

Touched by the engine's thread only; each chat's events (``("delta", text)``, ``("done", finish,
completion_tokens)``, ``("error", message)``) go to its request through the job's ``emit``.
"""

import logging
from collections.abc import Sequence
from typing import Any

import torch

from nosink.checks import printable
from nosink.models.riding import Rider
from nosink.serve import kv
from nosink.serve.jobs import ChatJob, Sampling

logger = logging.getLogger(__name__)


class Chats:
    """The chats waiting and being decoded (at most ``max_active`` side by side), and their batch's KV cache."""

    def __init__(
        self, lm: torch.nn.Module | None, tokenizer: Any, max_active: int, stats: dict[str, int], compiled: bool = False
    ) -> None:
        self.lm, self.tokenizer, self.max_active, self.stats = lm, tokenizer, max_active, stats
        self.waiting: list[ChatJob] = []
        self.active: list[ChatJob] = []  # row i of self.rows is self.active[i]
        # The chats being decoded (compiled: their steps, see kv.Rows), and their prompts' prefill (rows grow as
        # needed; never compiled: each new prompt length would be a compilation of its own).
        self.rows = kv.Rows(lm, rows=max_active, compiled=compiled) if lm is not None else None
        self.incoming = kv.Rows(lm) if lm is not None else None
        eos = getattr(getattr(lm, "generation_config", None), "eos_token_id", None) if lm is not None else None
        eos = eos if eos is not None else tokenizer.eos_token_id
        self.eos = set(eos if isinstance(eos, (list, tuple)) else [eos]) - {None}

    def __len__(self) -> int:
        return len(self.waiting) + len(self.active)

    def warm_up(self) -> None:
        """With compiled steps, compile them (and capture their graphs) before any chat: see
        :meth:`kv.Rows.warm_up`. Nothing otherwise."""
        if self.rows is not None and self.rows.compiling:
            logger.info("compiling the chats' decode steps (--chat-compile): minutes on a first start")
            self.rows.warm_up()

    def add(self, chat: ChatJob) -> None:
        """Queue a chat; it starts when fewer than ``max_active`` are being decoded."""
        self.waiting.append(chat)

    def graph_counts(self) -> dict[str, int]:
        """The CUDA graphs of chat steps and prefills: kept now (``chat_graphs``) and captured in all."""
        parts = [r.graph_counts() for r in (self.rows, self.incoming) if r is not None]
        kept, captured = sum(p["graphs"] for p in parts), sum(p["captures"] for p in parts)
        return {"chat_graphs": kept, "chat_graph_captures": captured}

    def jobs(self) -> list[ChatJob]:
        """Every chat not finished yet."""
        return self.waiting + self.active

    def step(self) -> None:
        """One step: a token of every active chat (one forward), then the waiting chats that fit start (one more)."""
        self._drop_cancelled()
        if self.active:
            self._decode()
        self._start_waiting()

    def rider(self) -> Rider | None:
        """The next step's tokens as a rider of an embedding batch (:mod:`nosink.models.riding`), to be taken with
        :meth:`ridden`; None where no chat is being decoded (or the step cannot be set up: :meth:`step` then runs
        it alone and says what failed)."""
        self._drop_cancelled()
        if not self.active or self.rows is None:
            return None
        try:
            return self.rows.rider([c.ids[-1] for c in self.active])
        except Exception:
            logger.exception("a chat step could not ride an embedding batch; it runs alone")
            return None

    def ridden(self, rider: Rider) -> None:
        """Finish the step :meth:`rider` set up, as :meth:`step` does: each chat takes its token (where no pass
        carried the rider, its step runs alone now), then the waiting chats that fit start."""
        assert self.rows is not None
        if rider.logits is None:
            self._decode()
        else:
            self._advance(self.rows.ridden(rider))
        self._start_waiting()

    def _start_waiting(self) -> None:
        room = self.max_active - len(self.active)
        if self.waiting and room > 0:
            starting, self.waiting = self.waiting[:room], self.waiting[room:]
            self._start(starting)

    # -- the steps

    def _drop_cancelled(self) -> None:
        """Chats whose clients are gone leave before their next forward."""
        waiting = [c for c in self.waiting if not c.cancelled]
        dropped, self.waiting = len(self.waiting) - len(waiting), waiting
        gone = [c for c in self.active if c.cancelled]
        if gone:
            self._keep([c for c in self.active if not c.cancelled])
        self.stats["dropped"] += dropped + len(gone)  # counted once they are out of the lists

    def _decode(self) -> None:
        """Feed every active chat its last token in one forward and take each one's next token."""
        assert self.rows is not None
        try:
            logits = self.rows.step([c.ids[-1] for c in self.active])  # (B, V)
        except Exception:
            logger.exception("batched chat decoding failed; retrying each chat alone")
            logits = self._decode_alone()
        self._advance(logits)

    def _decode_alone(self) -> torch.Tensor | None:
        """The failed step again, one chat at a time: a chat whose step fails again gets an error, the others go on."""
        assert self.rows is not None
        logits, ok, kept = [], [], []
        try:
            alone = self.rows.split()
        except Exception as err:
            self._fail_all(self.active, err)
            return None
        for chat, row in zip(self.active, alone, strict=True):
            try:
                logits.append(row.step([chat.ids[-1]]))
                ok.append(row)
                kept.append(chat)
            except Exception as err:
                logger.exception("chat generation failed")
                emit(chat, ("error", f"generation failed: {printable(str(err))}"))
        try:
            self.rows.clear()
            self.rows.join(ok)
        except Exception as err:
            self._fail_all(kept, err)
            return None
        self.active = kept
        return torch.cat(logits) if logits else None

    def _start(self, chats: list[ChatJob]) -> None:
        """Prefill ``chats`` in one forward (each alone if that fails); each takes its first token, joins the batch."""
        if self.lm is None or self.rows is None:
            for chat in chats:
                emit(chat, ("error", "generation failed: this server has no language model"))
            return
        for chat in chats:
            chat.generator = torch.Generator(device="cpu")
            if chat.sampling.seed is None:
                chat.generator.seed()
            else:
                chat.generator.manual_seed(chat.sampling.seed)
            chat.detokenizer = Detokenizer(self.tokenizer)
        started: list[ChatJob] = []
        logits: list[torch.Tensor] = []
        try:
            logits.append(self._prefill(chats))
            started += chats
        except Exception:
            logger.exception("batched prefill failed; retrying each chat alone")
            for chat in chats:
                try:
                    logits.append(self._prefill([chat]))
                    started.append(chat)
                except Exception as err:
                    logger.exception("chat generation failed")
                    emit(chat, ("error", f"generation failed: {printable(str(err))}"))
        if not started:
            return
        old = len(self.active)
        self.active += started
        self._advance(torch.cat(logits), first=old)

    def _prefill(self, chats: list[ChatJob]) -> torch.Tensor:
        """Prefill ``chats`` in one forward and add them to the rows being decoded: their next tokens' logits."""
        assert self.rows is not None and self.incoming is not None
        try:
            logits = self.incoming.prefill([c.prompt_ids for c in chats])
            self.rows.join([self.incoming])
        finally:
            self.incoming.clear()
        return logits

    def _advance(self, logits: torch.Tensor | None, first: int = 0) -> None:
        """Give ``self.active[first + i]`` the token sampled from ``logits[i]``; the chats that end leave the batch."""
        if logits is None:
            return
        chats = self.active[first:]
        try:  # sampled where the logits are: only the token ids cross to the host
            tokens: list[int | None] = sample_rows(logits, [c.sampling for c in chats], [c.generator for c in chats])
        except Exception:  # one chat's settings at fault: the others must not fail with it
            logger.exception("batched sampling failed; sampling each chat alone")
            tokens = [_sample_or_none(row, c) for row, c in zip(logits, chats, strict=True)]
        ended = set()
        for chat, token in zip(chats, tokens, strict=True):
            try:
                if token is None:
                    raise ValueError("no token can be sampled: the probabilities are not finite numbers")
                if self._take_token(chat, token):
                    ended.add(id(chat))
            except Exception as err:
                logger.exception("chat generation failed")
                ended.add(id(chat))
                emit(chat, ("error", f"generation failed: {printable(str(err))}"))
        if ended:
            self._keep([c for c in self.active if id(c) not in ended])

    def _take_token(self, chat: ChatJob, token: int) -> bool:
        """Append ``token`` to ``chat``'s answer and emit the text it shows; True if that ends the answer."""
        self.stats["chat_tokens"] += 1
        finish = None
        if token in self.eos:
            finish = "stop"
        else:
            chat.ids.append(token)
            chat.detokenizer.add(token)
        if finish is not None or len(chat.ids) >= chat.sampling.max_tokens:
            chat.detokenizer.flush()  # the answer ends here: its last characters show even if incomplete
        text = chat.detokenizer.text
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
            emit(chat, ("done", finish, len(chat.ids) + (token in self.eos)))
        return finish is not None

    def _keep(self, chats: list[ChatJob]) -> None:
        """Keep only ``chats`` (active ones, in order) in the batch."""
        row = {id(c): i for i, c in enumerate(self.active)}  # by identity: jobs are dataclasses, equal by value
        rows = [row[id(c)] for c in chats]
        if self.rows is not None:
            try:
                self.rows.keep(rows)
            except Exception as err:
                self._fail_all(chats, err)
                return
        self.active = chats

    def _fail_all(self, chats: list[ChatJob], err: Exception) -> None:
        """The cache could not be rearranged (out of memory): ``chats`` fail, and no chat is left half in it."""
        logger.exception("chat generation failed: the chats' cache could not be rearranged")
        for chat in chats:
            emit(chat, ("error", f"generation failed: {printable(str(err))}"))
        self.active = []
        if self.rows is not None:
            self.rows.n = self.rows.end = 0  # what is in the buffers is garbage now; clear() may fail as well
            try:
                self.rows.clear()
            except Exception:
                logger.exception("clearing the chats' cache failed")


class Detokenizer:
    """The text of a growing answer, decoding only its last few tokens at each new one.

    vLLM's and TGI's prefix and read offsets: ``ids[prefix:read]`` were shown last time, ``ids[read:]`` are new.
    Decoding ``ids[prefix:]`` and ``ids[prefix:read]`` gives the new text as the difference, with the tokens
    before it as context (so a tokenizer's merging of spaces and pieces is as in a whole decode); while it
    ends in U+FFFD, a character whose bytes are still coming, nothing is shown and the offsets wait.
    """

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.ids: list[int] = []
        self.prefix = self.read = 0
        self.text = ""  # what has been decoded so far

    def add(self, token: int) -> str:
        """Take the next token; the text it completes (``""`` while a character is incomplete)."""
        self.ids.append(token)
        before, after = self._decode(self.ids[self.prefix : self.read]), self._decode(self.ids[self.prefix :])
        if len(after) <= len(before) or after.endswith("\ufffd"):
            return ""
        self.prefix, self.read = self.read, len(self.ids)
        self.text += after[len(before) :]
        return after[len(before) :]

    def flush(self) -> str:
        """The text of the tokens not shown yet, even an incomplete character (the answer ends)."""
        before, after = self._decode(self.ids[self.prefix : self.read]), self._decode(self.ids[self.prefix :])
        new = after[len(before) :]
        self.prefix, self.read = self.read, len(self.ids)
        self.text += new
        return new

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True) if ids else ""


def emit(chat: ChatJob, event: tuple) -> None:
    """Hand ``event`` to the chat's request; a chat whose event loop is gone is cancelled."""
    try:
        chat.emit(event)
    except RuntimeError:  # the event loop is closed: nobody is listening any more
        chat.cancelled = True


def sample(logits: torch.Tensor, sampling: Sampling, generator: torch.Generator | None) -> int:
    """One token id from ``(V,)`` logits, as :func:`sample_rows` samples a row.

    Raises:
        ValueError: where no token can be sampled (a NaN temperature, no finite logit).
    """
    token = sample_rows(logits[None], [sampling], [generator])[0]
    if token is None:
        raise ValueError("no token can be sampled: the probabilities are not finite numbers")
    return token


def sample_rows(
    logits: torch.Tensor, samplings: Sequence[Sampling], generators: Sequence[torch.Generator | None]
) -> list[int | None]:
    """A token id from each row of ``(n, V)`` logits, on their device: greedy at temperature 0, else drawn from
    softmax(logits / T) cut to top_p; None for a row with no finite probabilities.

    A row is drawn by inverting its distribution's cumulative sum (tokens sorted by probability) at one uniform
    number from its own generator (on the host), so a row's token depends on its logits and its generator only,
    never on the other rows. The logits are shifted to a maximum of 0 in float64 before dividing, so a tiny
    temperature gives no NaN. Only the ``n`` ids are copied to the host.
    """
    tokens = logits.argmax(-1)  # (n,): greedy rows take this
    drawn = [i for i, s in enumerate(samplings) if s.temperature != 0]
    valid = ~torch.isnan(logits).any(-1) & torch.isfinite(logits).any(-1)  # (n,): a NaN is a failure, not a token
    if drawn:
        device = logits.device
        index = torch.tensor(drawn, dtype=torch.long, device=device)
        x = logits.index_select(0, index).double()  # (r, V)
        temperature = torch.tensor([samplings[i].temperature for i in drawn], dtype=torch.float64, device=device)
        probs = torch.softmax((x - x.max(-1, keepdim=True).values) / temperature[:, None], dim=-1)
        sorted_probs, order = probs.sort(-1, descending=True)
        top_p = torch.tensor([samplings[i].top_p for i in drawn], dtype=torch.float64, device=device)
        outside = sorted_probs.cumsum(-1) - sorted_probs >= top_p[:, None]
        outside[:, 0] = False  # kept even where top_p rounds to 0 next to the probabilities
        cdf = sorted_probs.masked_fill(outside, 0).cumsum(-1)  # (r, V)
        total = cdf[:, -1]
        uniform = torch.stack([torch.rand((), dtype=torch.float64, generator=generators[i]) for i in drawn])
        at = torch.searchsorted(cdf, (uniform.to(device) * total)[:, None]).clamp(max=cdf.shape[1] - 1)  # (r, 1)
        tokens = tokens.index_copy(0, index, order.gather(1, at)[:, 0])
        valid = valid.index_copy(0, index, valid.index_select(0, index) & torch.isfinite(total) & (total > 0))
    ids, ok = tokens.tolist(), valid.tolist()
    return [t if good else None for t, good in zip(ids, ok, strict=True)]


def _sample_or_none(logits: torch.Tensor, chat: ChatJob) -> int | None:
    try:
        return sample(logits, chat.sampling, chat.generator)
    except Exception:
        logger.exception("chat sampling failed")
        return None


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
