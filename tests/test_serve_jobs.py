"""Jobs crossing to the model's process: their wire form, and the lock-free reply that answers them there."""

import concurrent.futures
import pickle

from hypothesis import given, settings
from hypothesis import strategies as st

from nosink.models.texts import Tokenized
from nosink.serve.jobs import EmbedJob, Reply

OPS = ["cancel", "cancelled", "done", "running", "result", "error", "callback", "answer"]


def _apply(reply, op, calls):
    """One operation on a future or a reply: what it returned, or the type of what it raised."""
    try:
        if op == "cancel":
            return reply.cancel()
        if op == "cancelled":
            return reply.cancelled()
        if op == "done":
            return reply.done()
        if op == "running":
            return reply.set_running_or_notify_cancel()
        if op == "result":
            return reply.set_result(7)
        if op == "error":
            return reply.set_exception(ValueError("no"))
        if op == "callback":
            return reply.add_done_callback(lambda r: calls.append(len(calls)))
        # "answer": what a finished or cancelled one holds (never asked of a pending one: a future would wait)
        if not reply.done():
            return "pending"
        error = reply.exception()
        return ("error", type(error).__name__) if error is not None else ("result", reply.result())
    except Exception as err:
        return type(err).__name__


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(OPS), max_size=10))
def test_a_reply_behaves_as_a_future_does(ops):
    # The engine's thread uses a Reply where a front-end uses a Future: every sequence of the operations it uses
    # gives the same answers, the same errors and the same callbacks, once each.
    future, reply = concurrent.futures.Future(), Reply()
    future_calls, reply_calls = [], []
    for op in ops:
        assert _apply(reply, op, reply_calls) == _apply(future, op, future_calls), op
    assert reply_calls == future_calls


def test_a_failing_callback_does_not_stop_the_others(caplog):
    reply, calls = Reply(), []
    reply.add_done_callback(lambda r: 1 / 0)
    reply.add_done_callback(lambda r: calls.append(r.result()))
    reply.set_result(3)
    assert calls == [3] and "callback failed" in caplog.text


def test_an_embedding_job_crosses_as_its_tokens_alone():
    # What the model's process reads: the token ids, configuration and lengths (counted by the front-end), a
    # fresh Reply; not the offsets, which only a front-end reads.
    tokens = Tokenized(
        prefix_ids=[[1], [1, 9]], text_ids=[[5, 6], [7]], offsets=[[(0, 1), (2, 3)], [(0, 2)]], suffix_ids=[[3], []]
    )
    job = EmbedJob(tokens, "early")
    job.cancelled = True  # the state of a job stays with its side
    crossed = pickle.loads(pickle.dumps(job))
    assert crossed.tokens == Tokenized(prefix_ids=[[1], [1, 9]], text_ids=[[5, 6], [7]], suffix_ids=[[3], []])
    assert crossed.config == "early" and crossed.lengths == [4, 3] == tokens.lengths
    assert isinstance(crossed.future, Reply) and not crossed.cancelled and crossed.vectors is None


def test_the_start_up_heap_is_left_out_of_collections_while_serving():
    import gc
    import weakref

    from nosink.serve.heap import frozen_heap

    class Node:
        pass

    node = Node()
    node.me = node  # a cycle made before the block: frozen with the rest
    alive = weakref.ref(node)
    with frozen_heap():
        assert gc.get_freeze_count() > 1000  # the interpreter's, torch's and transformers' objects
        del node
        gc.collect()
        assert alive() is not None  # a full collection inside the block does not look at the frozen heap
    gc.collect()
    assert alive() is None and gc.get_freeze_count() == 0  # after it, the cycle is freed as usual
