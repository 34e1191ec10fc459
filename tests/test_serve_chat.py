"""Chat decoding with continuous batching: chats joining and leaving one batched forward, each answering as if alone.

The scheduler (:class:`nosink.serve.generation.Chats`) is driven step by step, with no HTTP: chats are added
at chosen steps, and their tokens are compared with the same chats decoded alone (``lm.generate``).
"""

import math
import random

import pytest
import torch
import transformers as tf
from tiny import CONFIGS, tiny_tokenizer

from nosink.serve import engine as engine_module
from nosink.serve import kv
from nosink.serve.generation import Chats, Detokenizer
from nosink.serve.jobs import ChatJob, Sampling
from nosink.serve.limits import Limits

VOCAB = len(tiny_tokenizer())
# Every family the encoder knows: full attention; a sliding window (3) on every layer (mistral), on some (qwen2),
# sliding and full layers 5:1 (gemma3_text). Each seed's random model runs most chats to max_tokens (gemma3_text's
# ends two of them with EOS early).
SEEDS = {"llama": 0, "mistral": 0, "qwen2": 1, "qwen3": 0, "gemma3_text": 1, "phi3": 1, "olmo": 0, "olmo2": 0}
SEEDS["gpt2"] = 0


def tiny_lm(family: str = "llama", seed: int = 0):
    """A seeded random causal LM of ``family`` (float32) over the test tokenizer's words, and that tokenizer."""
    tok = tiny_tokenizer()
    config = CONFIGS[family]()
    config.vocab_size = len(tok)
    torch.manual_seed(seed)
    lm = tf.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    with torch.no_grad():
        for p in lm.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    return lm.eval(), tok


def prompt(length: int, seed: int) -> list[int]:
    """A prompt of ``length`` word ids (never a special token)."""
    rng = random.Random(seed)
    return [1] + [rng.randrange(4, VOCAB) for _ in range(length - 1)]


def chat(prompt_ids: list[int], max_tokens: int, temperature: float = 0.0, seed: int | None = None) -> ChatJob:
    """A chat job that keeps its events in ``job.events``."""
    events: list[tuple] = []
    job = ChatJob(prompt_ids, Sampling(max_tokens, temperature, 1.0, (), seed), events.append)
    job.events = events
    return job


def drive(chats: Chats, arrivals: dict[int, list[ChatJob]], on_step=None, limit: int = 200) -> None:
    """Step ``chats`` until every chat is done, adding ``arrivals[i]`` before step ``i``."""
    with torch.inference_mode():
        for i in range(limit):
            for job in arrivals.get(i, []):
                chats.add(job)
            if on_step is not None:
                on_step(i)
            if not len(chats) and i > max(arrivals):
                return
            chats.step()
    raise AssertionError("the chats did not finish")


def alone(lm, prompt_ids: list[int], max_tokens: int) -> list[int]:
    """Greedy tokens of ``prompt_ids`` decoded alone by transformers' ``generate`` (the EOS token left out)."""
    ids = torch.tensor([prompt_ids], device=lm.device)
    with torch.no_grad():
        out = lm.generate(
            ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_tokens, do_sample=False, pad_token_id=0
        )
    return [t for t in out[0, len(prompt_ids) :].tolist() if t != 2]


def done(job: ChatJob) -> tuple:
    """The chat's last event, which must be its only "done"."""
    assert [e[0] for e in job.events].count("done") == 1 and job.events[-1][0] == "done", job.events
    return job.events[-1]


def text(job: ChatJob) -> str:
    return "".join(e[1] for e in job.events if e[0] == "delta")


@pytest.mark.parametrize("family", SEEDS)
def test_batched_greedy_decoding_equals_each_chat_alone_as_chats_join_and_leave(family):
    lm, tok = tiny_lm(family, SEEDS[family])
    # (prompt length, max_tokens, step it arrives at): longer than the sliding window (3), leaving at other steps
    plan = [(3, 9, 0), (7, 4, 0), (2, 6, 2), (11, 5, 3), (5, 3, 3), (6, 7, 6), (9, 2, 9)]
    jobs = [chat(prompt(n, i), m) for i, (n, m, _) in enumerate(plan)]
    arrivals: dict[int, list[ChatJob]] = {}
    for job, (_, _, at) in zip(jobs, plan, strict=True):
        arrivals.setdefault(at, []).append(job)
    widths = []
    chats = Chats(lm, tok, max_active=4, stats={"chat_tokens": 0, "dropped": 0})  # 4: some chats wait their turn
    drive(chats, arrivals, on_step=lambda i: widths.append(len(chats.active)))
    assert max(widths) == 4  # some chats waited their turn
    assert any(
        a > b < c for a, b, c in zip(widths, widths[1:], widths[2:], strict=False)
    )  # chats left, then others joined
    lengths = 0
    for job, (_, m, _) in zip(jobs, plan, strict=True):
        want = alone(lm, job.prompt_ids, m)
        assert job.ids == want
        _, finish, count = done(job)
        assert finish == ("length" if len(want) == m else "stop")
        assert count == len(want) + (finish == "stop")
        assert text(job) == tok.decode(job.ids, skip_special_tokens=True)  # the incremental text is the whole text
        lengths += len(job.ids)
    assert lengths > 2 * len(jobs)  # not all chats ended at once on EOS
    assert len(chats.rows) == chats.rows.width == 0 and not chats.active


def test_a_seeded_chat_samples_the_same_tokens_alone_and_beside_others():
    lm, tok = tiny_lm()

    def run(others: bool) -> list[int]:
        mine = chat(prompt(6, 0), 12, temperature=1.3, seed=11)
        arrivals = {0: [mine]}
        if others:
            arrivals = {0: [chat(prompt(9, 1), 5, 1.3, 1), mine, chat(prompt(2, 2), 20)], 3: [chat(prompt(4, 3), 3)]}
        drive(Chats(lm, tok, 8, {"chat_tokens": 0, "dropped": 0}), arrivals)
        return mine.ids

    first = run(False)
    assert len(first) > 3 and run(True) == first
    other_seed = chat(prompt(6, 0), 12, temperature=1.3, seed=12)
    drive(Chats(lm, tok, 8, {"chat_tokens": 0, "dropped": 0}), {0: [other_seed]})
    assert other_seed.ids != first  # the seed is what repeats the answer


def test_a_cancelled_chat_leaves_the_batch_and_the_others_go_on_unchanged():
    lm, tok = tiny_lm()
    keep1, gone, keep2 = chat(prompt(4, 0), 10), chat(prompt(12, 1), 10), chat(prompt(3, 2), 10)
    waiting_gone = chat(prompt(5, 3), 10)
    stats = {"chat_tokens": 0, "dropped": 0}
    chats = Chats(lm, tok, 3, stats)
    widths = []

    def cancel(i: int) -> None:
        widths.append(chats.rows.width)
        if i == 3:
            gone.cancelled = waiting_gone.cancelled = True
            seen = len(gone.events)
            gone.events_before = seen

    drive(chats, {0: [keep1, gone, keep2, waiting_gone]}, on_step=cancel)
    assert len(gone.events) == gone.events_before and all(e[0] == "delta" for e in gone.events)  # nothing after
    assert waiting_gone.events == []
    assert stats["dropped"] == 2
    for job in (keep1, keep2):
        assert job.ids == alone(lm, job.prompt_ids, 10) and done(job)[1] in ("length", "stop")
    # Before step 3: the 12-token prompt and 2 fed tokens; after, the 4-token prompt and 3 fed: its padding was cut.
    assert (widths[3], widths[4]) == (12 + 2, 4 + 3)


def test_a_failing_chat_fails_alone_and_a_failed_batched_step_is_retried_chat_by_chat(monkeypatch):
    lm, tok = tiny_lm()
    good = [chat(prompt(4, 0), 8), chat(prompt(7, 1), 8)]
    bad_prompt = chat([*prompt(5, 2)[:-1], VOCAB + 7], 8)  # an id past the vocabulary: its prefill fails
    bad_sampling = chat(prompt(3, 3), 8, temperature=math.nan)  # its sampling fails at the first token
    forward, fails = lm.forward, []

    def flaky(*args, **kwargs):  # the first two batched decode steps fail, as an out-of-memory error would
        ids = kwargs["input_ids"]
        if ids.shape == (2, 1) and len(fails) < 2:
            fails.append(1)
            raise RuntimeError("CUDA out of memory (pretend)")
        return forward(*args, **kwargs)

    monkeypatch.setattr(lm, "forward", flaky)
    drive(Chats(lm, tok, 8, {"chat_tokens": 0, "dropped": 0}), {0: [good[0], bad_prompt, good[1], bad_sampling]})
    monkeypatch.undo()
    assert len(fails) == 2
    for job in (bad_prompt, bad_sampling):
        assert [e[0] for e in job.events] == ["error"] and job.events[0][1].startswith("generation failed: ")
    for job in good:
        assert job.ids == alone(lm, job.prompt_ids, 8) and done(job)


def test_join_and_keep_place_the_chats_right_aligned_and_cut_the_padding_columns():
    lm, _ = tiny_lm("qwen2")  # layers 0-1 full attention, 2-3 a sliding window of 3
    with torch.inference_mode():
        _, short = kv.prefill(lm, [prompt(2, 0)])
        _, long = kv.prefill(lm, [prompt(6, 1), prompt(5, 2)])
        rows = kv.Rows(lm)
        rows.join([short])
        assert (len(rows), rows.width) == (1, 2)
        rows.join([long])  # the first chat moves right: every row's tokens end at column 6
        assert rows.mask[:3, :6].long().tolist() == [[0, 0, 0, 0, 1, 1], [1, 1, 1, 1, 1, 1], [0, 1, 1, 1, 1, 1]]
        assert not rows.mask[:, 6:].any() and rows.width == 6
        full, sliding = rows.keys[0], rows.keys[3]
        assert torch.equal(full[0, :, 4:6], short.cache.layers[0].keys[0])
        assert torch.equal(full[1:3, :, :6], long.cache.layers[0].keys)
        assert long.cache.layers[3].keys.shape[2] == 2  # the sliding layer holds its last window - 1 columns
        assert torch.equal(sliding[1:3, :, 4:6], long.cache.layers[3].keys)
        assert short.cache.layers[0].keys.shape[2] == 2  # the inputs are left as they were
        rows.keep([2, 0])
        assert (len(rows), rows.width) == (2, 5)
        assert rows.mask[:2, :5].long().tolist() == [[1, 1, 1, 1, 1], [0, 0, 0, 1, 1]] and not rows.mask[2:].any()
        assert torch.equal(rows.keys[0][1, :, 3:5], short.cache.layers[0].keys[0])
        assert torch.equal(rows.keys[0][0, :, :5], long.cache.layers[0].keys[1, :, 1:])
        rows.keep([])
        assert (len(rows), rows.width) == (0, 0)


def test_a_chat_whose_states_overflow_fails_alone_and_leaves_nothing_for_the_next():
    lm, tok = tiny_lm()
    later = chat(prompt(5, 1), 6)
    want = alone(lm, later.prompt_ids, 6)
    bad_token = 7
    with torch.no_grad():
        lm.get_input_embeddings().weight[bad_token] = math.inf  # its hidden states overflow, as fp16's can
    clean = [t for t in prompt(20, 0) if t != bad_token]
    bad = chat([*clean[:10], bad_token, *clean[10:]], 6, temperature=1.0, seed=0)  # prefilled 32 wide
    chats = Chats(lm, tok, 3, {"chat_tokens": 0, "dropped": 0})  # 3: the buffers take 4 rows, a power of two
    drive(chats, {0: [bad]})
    assert [e[0] for e in bad.events] == ["error"]
    drive(chats, {0: [later, chat(prompt(4, 2), 3), chat(prompt(6, 3), 3)]})  # 3 chats at once in 4 rows
    assert later.ids == want and done(later)  # the NaN the bad chat left in its columns was wiped


def _two_chats(lm, compiled: bool) -> kv.Rows:
    """Two prompts prefilled (uncompiled) and joined into a :class:`kv.Rows` compiled or not."""
    incoming = kv.Rows(lm, graphs=False)
    incoming.prefill([prompt(4, 0), prompt(3, 1)])
    rows = kv.Rows(lm, graphs=False, compiled=compiled)
    rows.join([incoming])
    return rows


def test_a_compiled_chat_step_gives_the_logits_of_the_step_as_it_is():
    lm, _ = tiny_lm("qwen2", SEEDS["qwen2"])
    torch._dynamo.reset()  # dynamo keeps compiled code on the function's code object: this test compiles it anew
    frames = torch._dynamo.utils.counters["frames"]["ok"]
    with torch.inference_mode():
        compiled, eager = _two_chats(lm, True), _two_chats(lm, False)
        for step in range(3):
            got, want = compiled.step([10 + step, 11 + step]), eager.step([10 + step, 11 + step])
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    assert compiled._compiled is not None  # compiled all along: nothing failed and turned it off
    assert torch._dynamo.utils.counters["frames"]["ok"] > frames  # and torch.compile did compile the step


@pytest.mark.parametrize(("buffer_rows", "chats"), [(4, (1, 3, 4)), (1, (1,))])
def test_compiled_rows_warmed_up_compile_nothing_more_for_the_chats_their_buffers_hold(buffer_rows, chats):
    # warm_up compiles the step of one row and of several before any chat (the server does it at start-up), so no
    # chat waits for a compilation; the chats then decode as uncompiled ones, and the buffers are left empty. With
    # buffers of one row (one chat at a time) it warms only that: two rows would grow them, and compile anew.
    lm, _ = tiny_lm("qwen2", SEEDS["qwen2"])
    torch._dynamo.reset()
    with torch.inference_mode():
        rows = kv.Rows(lm, graphs=False, rows=buffer_rows, compiled=True)
        rows.warm_up()
        assert len(rows) == 0 and rows.width == 0 and rows.compiling and rows.mask.shape[0] == buffer_rows
        assert not any(bool(b.any()) for b in (*rows.keys, *rows.values))  # the dummy chats left nothing behind
        graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
        assert graphs >= min(2, buffer_rows)  # the step of one row (and of several), compiled by warm_up
        for n in chats:
            incoming, alone = kv.Rows(lm, graphs=False), kv.Rows(lm, graphs=False)
            prompts = [prompt(3 + i, i) for i in range(n)]
            incoming.prefill(prompts)
            rows.join([incoming])
            alone.prefill(prompts)
            for step in range(2):
                tokens = [10 + step + i for i in range(n)]
                torch.testing.assert_close(rows.step(tokens), alone.step(tokens), atol=1e-5, rtol=1e-5)
            rows.clear()
        with pytest.raises(ValueError, match="before any chat"):
            rows.join([_two_chats(lm, False)])
            rows.warm_up()
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == graphs  # no chat compiled anything
    assert rows.compiling


def test_an_engine_with_compiled_chat_steps_warms_them_up_at_start_as_chat_runs_and_none_without(monkeypatch):
    from nosink import EncoderFromDecoder
    from nosink.models.adapters import adapter_layers, add_lora

    lm, tok = tiny_lm("llama", SEEDS["llama"])
    encoder = EncoderFromDecoder.from_model(lm, "F* | M0B*1", tok)
    add_lora(encoder.decoder, list(range(encoder.depth)), rank=2, alpha=4, dropout=0.0)  # embeddings fine-tuned
    adapters = adapter_layers(lm)
    warmed = []  # per warm_up: whether the steps compile, in inference mode, with the adapter off (as chat runs)

    def warm_up(rows):
        warmed.append((rows.compiling, torch.is_inference_mode_enabled(), all(a.disable_adapters for a in adapters)))

    monkeypatch.setattr(kv.Rows, "warm_up", warm_up)
    monkeypatch.setattr(kv, "_compile", lambda forward: forward)  # what warm_up compiles is the test above's
    assert adapters
    for compiled, want in ((False, []), (True, [(True, True, True)])):
        warmed.clear()
        engine = engine_module.Engine(encoder, lm, tok, Limits(), chat_compile=compiled)
        engine.start()
        engine.start()  # started already: nothing more
        engine.stop()
        assert warmed == want, compiled
        assert not any(a.disable_adapters for a in adapters)  # on again for the embeddings


def test_a_chat_step_that_fails_to_compile_runs_as_it_is_from_then_on(monkeypatch, caplog):
    calls = []

    def broken(forward):
        def compiled(rows, length):
            calls.append((rows, length))
            raise torch._dynamo.exc.BackendCompilerFailed(forward, RuntimeError("no compiler here"), None)

        return compiled

    monkeypatch.setattr(kv, "_compile", broken)
    lm, _ = tiny_lm("llama", SEEDS["llama"])
    with torch.inference_mode():
        compiled, eager = _two_chats(lm, True), _two_chats(lm, False)
        for step in range(2):
            got, want = compiled.step([10 + step, 11 + step]), eager.step([10 + step, 11 + step])
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    assert len(calls) == 1 and compiled._compiled is None  # tried once, then uncompiled
    assert "chat steps run uncompiled: compiling one failed" in caplog.text


def test_a_compiled_chat_steps_own_error_fails_it_and_leaves_compiling_on(monkeypatch):
    # An error of the step itself (out of memory, say) is not torch.compile's: the step fails as it would uncompiled
    # (leaving the chats as they were), and the next step runs compiled again.
    fail = [True]

    def flaky(forward):
        def compiled(rows, length):
            if fail.pop() if fail else False:
                raise torch.OutOfMemoryError("CUDA out of memory (a stand-in)")
            return forward(rows, length)

        return compiled

    monkeypatch.setattr(kv, "_compile", flaky)
    lm, _ = tiny_lm("llama", SEEDS["llama"])
    with torch.inference_mode():
        compiled, eager = _two_chats(lm, True), _two_chats(lm, False)
        with pytest.raises(torch.OutOfMemoryError):
            compiled.step([10, 11])
        assert compiled._compiled is not None  # still compiling
        torch.testing.assert_close(compiled.step([10, 11]), eager.step([10, 11]), atol=1e-5, rtol=1e-5)


def test_rows_refuse_what_they_cannot_run():
    lm, _ = tiny_lm()
    rows = kv.Rows(lm)
    with pytest.raises(ValueError, match="at least one token"):
        rows.prefill([prompt(3, 0), []])
    with pytest.raises(ValueError, match="at least one prompt"):
        rows.prefill([])
    with torch.inference_mode():
        rows.prefill([prompt(3, 0)])
        with pytest.raises(ValueError, match="empty Rows"):
            rows.prefill([prompt(2, 1)])
        with pytest.raises(ValueError, match="one token to each of the 1 chats, got 2"):
            rows.step([5, 6])
    assert rows.graph_counts() == {"graphs": 0, "captures": 0}  # no graph off a GPU


@pytest.mark.parametrize(
    "device", ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU"))]
)
def test_a_prefill_of_more_prompts_than_the_kept_buffers_have_rows_grows_them(device):
    # Seen on an H200 under 8 streaming chats: five chats starting in one step after a prefill of four. On CUDA
    # copying the old buffers' n rows, n counting the new prompts already, failed (on a CPU an empty copy passes).
    lm, _ = tiny_lm()
    lm = lm.to(device)
    rows = kv.Rows(lm, graphs=False)
    with torch.inference_mode():
        rows.prefill([prompt(3, 0)])
        rows.clear()  # the buffers of the first size are kept, with their few rows
        have = rows.mask.shape[0]
        prompts = [prompt(3 + i, i) for i in range(have + 1)]
        got = rows.prefill(prompts)
    assert rows.mask.shape[0] > have and len(rows) == len(prompts)
    with torch.inference_mode():
        for i, p in enumerate(prompts):  # each prompt's next-token logits as when prefilled alone
            alone_rows = kv.Rows(lm, graphs=False)
            torch.testing.assert_close(got[i], alone_rows.prefill([p])[0], atol=1e-5, rtol=1e-4)


def test_a_chat_longer_than_the_buffers_grows_them_and_decodes_as_alone():
    lm, tok = tiny_lm()
    first = kv.FIRST_WIDTH
    long_chat, short_chat = chat(prompt(first - 3, 0), 8), chat(prompt(4, 1), 12)  # crosses the first width
    late = chat(prompt(first + 20, 2), 3)  # joins later, longer than the buffers: the others move right
    chats = Chats(lm, tok, 4, {"chat_tokens": 0, "dropped": 0})
    widths = []
    columns = lambda i: widths.append(chats.rows.mask.shape[1] if chats.rows.mask is not None else 0)  # noqa: E731
    drive(chats, {0: [long_chat, short_chat], 5: [late]}, on_step=columns)
    assert widths[1] == first and max(widths) == 2 * first  # grown once, by doubling
    for job, m in ((long_chat, 8), (short_chat, 12), (late, 3)):
        assert job.ids == alone(lm, job.prompt_ids, m)
    assert chats.rows.mask is None  # the last chat left: buffers above the first size are freed


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a GPU")
@pytest.mark.parametrize(
    ("family", "compiled"),
    [("llama", False), ("qwen2", False), ("gemma3_text", False), ("gpt2", False), ("qwen2", True)],
)
def test_on_a_gpu_the_decode_step_replays_a_cuda_graph_and_decodes_as_alone(family, compiled):
    lm, tok = tiny_lm(family, SEEDS[family])
    lm = lm.cuda()
    plan = [(3, 9, 0), (7, 4, 0), (2, 6, 2), (11, 5, 3), (5, 3, 3)]
    jobs = [chat(prompt(n, i), m) for i, (n, m, _) in enumerate(plan)]
    arrivals: dict[int, list[ChatJob]] = {}
    for job, (_, _, at) in zip(jobs, plan, strict=True):
        arrivals.setdefault(at, []).append(job)
    chats = Chats(lm, tok, max_active=4, stats={"chat_tokens": 0, "dropped": 0}, compiled=compiled)
    captured = []  # with compiled steps: whether each call of the compiled forward was being captured
    if compiled:
        step = chats.rows._compiled

        def counted(rows, length):
            captured.append(torch.cuda.is_current_stream_capturing())
            return step(rows, length)

        chats.rows._compiled = counted
    drive(chats, arrivals)
    decode_rows = {rows for rows, length in chats.rows.graphs if length == 1}
    assert chats.rows.broken is None and decode_rows <= {1, 2, 4} and len(decode_rows) >= 2
    assert chats.incoming.broken is None and chats.incoming.graphs  # the prompts were prefilled by graphs too
    if compiled:  # still compiling, and the compiled forward is what the graphs captured
        assert chats.rows._compiled is counted and any(captured)
    for job, (_, m, _) in zip(jobs, plan, strict=True):
        assert job.ids == alone(lm, job.prompt_ids, m)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a GPU")
def test_on_a_gpu_buffers_grown_mid_decode_are_captured_again():
    lm, tok = tiny_lm()
    lm = lm.cuda()
    first = kv.FIRST_WIDTH
    jobs = [chat(prompt(first - 3, 0), 8), chat(prompt(4, 1), 12), chat(prompt(first + 20, 2), 3)]
    chats = Chats(lm, tok, 4, {"chat_tokens": 0, "dropped": 0})
    widths = []
    columns = lambda i: widths.append(chats.rows.mask.shape[1] if chats.rows.mask is not None else 0)  # noqa: E731
    drive(chats, {0: jobs[:2], 5: jobs[2:]}, on_step=columns)
    assert max(widths) == 2 * first and chats.rows.broken is None
    assert chats.rows.captures > len({rows for rows, _ in chats.rows.graphs})  # the grown buffers' graphs again
    for job, m in zip(jobs, (8, 12, 3), strict=True):
        assert job.ids == alone(lm, job.prompt_ids, m)


@pytest.mark.parametrize(
    "sample",
    ["Grüße, 世界! 🙂🙂 naïve café — Ελληνικά, עברית and 𝄞𝄢.", "plain ascii words", "🤖" * 5 + " done"],
)
def test_incremental_detokenization_gives_the_text_of_a_whole_decode(smollm2_path, sample):
    tok = tf.AutoTokenizer.from_pretrained(smollm2_path)
    ids = tok(sample, add_special_tokens=False)["input_ids"]
    detok, pieces = Detokenizer(tok), []
    for token in ids:
        pieces.append(detok.add(token))
    pieces.append(detok.flush())
    assert "".join(pieces) == tok.decode(ids, skip_special_tokens=True) == sample
    assert not any("\ufffd" in p for p in pieces)  # a character split over tokens waits for its last byte
    if not sample.isascii():
        assert "" in pieces[:-1]  # ... which these samples have


def test_incremental_detokenization_of_any_token_ids_matches_a_whole_decode(smollm2_path):
    tok = tf.AutoTokenizer.from_pretrained(smollm2_path)
    rng = random.Random(0)
    for _ in range(50):
        ids = [rng.randrange(len(tok)) for _ in range(rng.randrange(1, 30))]  # any bytes, special tokens too
        detok = Detokenizer(tok)
        for token in ids:
            detok.add(token)
        detok.flush()
        assert detok.text == tok.decode(ids, skip_special_tokens=True), ids


class _Clock:
    """A fake ``time`` for the engine: the fake work below advances it, so the schedule is exact."""

    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now

    def monotonic(self) -> float:
        return self.now


class _Side:
    """A stand-in for the engine's embedding batches or chats: ``costs[i]`` seconds for unit ``i``."""

    def __init__(self, name: str, costs: list[float], clock: _Clock, log: list[str], engine, start: float = 0) -> None:
        self.name, self.costs, self.clock, self.log, self.engine = name, list(costs), clock, log, engine
        self.start = start  # when the work arrives
        self.in_flight = None  # the embedding side's batch in flight: none here, each unit is done when it ends

    def __len__(self) -> int:
        return len(self.costs) if self.clock.now >= self.start else 0

    def finish(self) -> None:
        pass

    def due(self) -> bool:
        return len(self) > 0

    def wait(self) -> float | None:
        return 0.0 if self.costs else None

    def jobs(self) -> list:
        return []

    def step(self) -> None:
        self.clock.now += self.costs.pop(0)
        self.log.append(self.name)
        if not (len(self.engine.batches) or len(self.engine.chats)):
            self.engine.inbox.put(engine_module._STOP)


def _schedule(
    monkeypatch, batches: list[float], steps: list[float], batches_from: float = 0, share: float = 0.5
) -> str:
    """The order the engine runs embedding batches (``E``) and chat steps (``c``) of the given durations."""
    clock, log = _Clock(), []
    monkeypatch.setattr(engine_module, "time", clock)
    _, tok = tiny_lm()
    engine = engine_module.Engine(None, None, tok, Limits(chat_share=share))
    engine.batches = _Side("E", batches, clock, log, engine, batches_from)
    engine.chats = _Side("c", steps, clock, log, engine)
    engine._loop()
    return "".join(log)


def test_the_engine_shares_the_model_time_between_embedding_batches_and_chat_steps(monkeypatch):
    unit = 1 / 128  # exact in binary, so the balance lands on 0 exactly
    # A 4-unit batch, then 1-unit chat steps until the chats have had as long, and so on; the rest alone.
    assert _schedule(monkeypatch, [4 * unit] * 3, [unit] * 15) == "EccccEccccEcccc" + "ccc"
    # A 4-unit prefill (one chat step) is followed by 1-unit batches until the embeddings have had as long.
    assert _schedule(monkeypatch, [unit] * 8, [4 * unit, unit, unit]) == "EcEEEEcEcEE"
    # Time used alone is not owed back: batches arriving after the chats ran alone take turns with them at once.
    assert _schedule(monkeypatch, [unit] * 2, [unit] * 10, batches_from=5 * unit) == "ccccc" + "EcE" + "cccc"


def test_the_chats_share_of_the_model_time_is_the_limits(monkeypatch):
    unit = 1 / 128
    # A quarter for the chats: after the first batch, one chat step for every three batches (lead: an embedding
    # unit takes 0.25 off it, a chat unit adds 0.75), the rest alone.
    assert _schedule(monkeypatch, [unit] * 30, [unit] * 10, share=0.25) == "E" + "cEEE" * 9 + "cEE"
    # Three quarters: three chat steps for every batch.
    assert _schedule(monkeypatch, [unit] * 10, [unit] * 30, share=0.75) == "Eccc" * 10
    # 4-unit batches at a quarter: chat steps until the balance is back, what is left over carried to the next turn
    # (lead -1, +0.5 after two steps; -0.5, +0.25; -0.75, 0): 4 chat units to 12 batch units, the rest alone.
    assert _schedule(monkeypatch, [4 * unit] * 3, [unit] * 8, share=0.25) == "EccEcEc" + "cccc"
