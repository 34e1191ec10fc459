"""The pipes between the front-ends and the model's process, without a server: framing, the model's side
reading in bulk, answers held back per unit of work and stacked, and what a broken or closed pipe does.

No web framework is needed here (unlike ``test_serve_processes.py``), so these run wherever the engine does.
"""

import multiprocessing
import pickle
import socket
import struct
import threading
import time

import numpy as np
import pytest

from nosink.models.texts import Tokenized
from nosink.serve.channel import Frames, frame
from nosink.serve.jobs import ChatJob, EmbedJob, Reply, Sampling
from nosink.serve.processes import PipeInbox, RemoteEngine, _stack


class Engine:
    """What the inbox asks of an engine: a check of each job (refusing any named in ``refused``) and cancelling."""

    def __init__(self, refused=()):
        self.refused, self.cancelled = set(refused), []

    def check(self, job):
        if isinstance(job, EmbedJob) and tuple(job.tokens.text_ids[0]) in self.refused:
            raise RuntimeError("a check that fails unexpectedly")

    def cancel(self, job):
        job.cancelled = True
        self.cancelled.append(job)


def _job(*ids, lengths=None):
    return EmbedJob(Tokenized(prefix_ids=[[1]], text_ids=[list(ids)], suffix_ids=None), lengths=lengths)


def _take(inbox, count):
    taken = []
    deadline = time.monotonic() + 60  # a bound on waiting, not a timing assertion
    while len(taken) < count and time.monotonic() < deadline:
        taken += inbox.take(1.0)
    return taken


def test_one_unit_of_work_answers_each_front_end_in_one_message():
    # The model's process holds back what one batch (or chat step) answers a front-end and sends it as one message
    # when the engine next takes its inbox; the front-end settles each request from it, in order.
    inbox = PipeInbox(Engine())
    model_end, front_end = multiprocessing.Pipe()
    inbox.attach(model_end, lambda why: None)
    jobs = [EmbedJob(Tokenized(prefix_ids=[[1]], text_ids=[[5 + i]], suffix_ids=None)) for i in range(3)]
    remote = RemoteEngine(front_end, most=8)
    for i, job in enumerate(jobs):
        remote.jobs[i], remote.idents[id(job)] = job, i
        front_end.send(("job", i, job))
    taken = _take(inbox, 3)
    assert [job.tokens.text_ids for job in taken] == [[[5]], [[6]], [[7]]]
    for k, job in enumerate(taken):  # what a batch does: each request's vectors, one after another
        job.future.set_running_or_notify_cancel()
        job.future.set_result(np.full((1, 2), k, dtype=np.float32))
    assert not front_end.poll()  # held back until the unit of work is over ...
    inbox.take(0.0)
    message = front_end.recv()  # ... then one message for the three, their vectors one array
    assert message[0] == "stacked" and message[2][:2] == ([0, 1, 2], [1, 1, 1])
    assert message[2][2].tolist() == [[0.0, 0.0], [1.0, 1.0], [2.0, 2.0]]
    assert not front_end.poll()
    remote._handle(*message)
    assert [job.future.result()[0, 0] for job in jobs] == [0.0, 1.0, 2.0] and remote.jobs == {}
    inbox.peers[0].send(("health", 9, {"waiting": 0}))  # a lone message goes as it is, not wrapped
    inbox.flush()
    assert front_end.recv() == ("health", 9, {"waiting": 0})


def test_answers_of_one_unit_keep_every_request_apart():
    # Requests of several inputs, one that failed and a chat's event in one unit of work: the vectors of the
    # requests that have them travel as one array, the rest beside it, and each request gets exactly its own.
    inbox = PipeInbox(Engine())
    model_end, front_end = multiprocessing.Pipe()
    inbox.attach(model_end, lambda why: None)
    sizes = [2, 1, 3, 1]
    jobs = [
        EmbedJob(Tokenized(prefix_ids=[[1]] * n, text_ids=[[5 + i]] * n, suffix_ids=None)) for i, n in enumerate(sizes)
    ]
    events = []
    chat = ChatJob([1, 5], Sampling(4, 0.0, 1.0, (), None), events.append)
    remote = RemoteEngine(front_end, most=8)
    for i, job in enumerate([*jobs, chat]):
        remote.jobs[i], remote.idents[id(job)] = job, i
        front_end.send(("job", i, job))
    taken = _take(inbox, 5)
    crossed = [job for job in taken if isinstance(job, EmbedJob)]
    assert [type(job.future) for job in crossed] == [Reply] * 4  # answered without a future's lock
    assert [job.lengths for job in crossed] == [[2] * n for n in sizes]  # counted by the front-end, sent along
    for k, job in enumerate(crossed):
        job.future.set_running_or_notify_cancel()
        if k == 2:
            job.future.set_exception(RuntimeError("no room"))
        else:
            job.future.set_result(np.arange(len(job) * 3, dtype=np.float32).reshape(len(job), 3) + 100 * k)
    next(job for job in taken if isinstance(job, ChatJob)).emit(("token", "hi"))
    inbox.take(0.0)
    message = front_end.recv()
    assert message[0] == "many" and sorted(m[0] for m in message[2]) == ["event", "failed", "stacked"]
    remote._handle(*message)
    for k, job in enumerate(jobs):
        if k == 2:
            with pytest.raises(RuntimeError, match="no room"):
                job.future.result()
        else:
            expected = np.arange(sizes[k] * 3, dtype=np.float32).reshape(sizes[k], 3) + 100 * k
            assert np.array_equal(job.future.result(), expected)
    assert events == [("token", "hi")] and list(remote.jobs) == [4]  # the chat goes on


def test_a_front_end_whose_pipe_ends_has_its_jobs_cancelled_after_its_last_messages():
    # Messages read in bulk: those sent just before the front-end went are still taken, then its jobs are cancelled.
    engine = Engine()
    inbox = PipeInbox(engine)
    model_end, front_end = multiprocessing.Pipe()
    inbox.attach(model_end, lambda why: None)
    long = _job(*range(200_000))  # more than the socket's buffer holds: read in several pieces

    def send():  # in a thread: the long message fills the pipe until the inbox reads it
        front_end.send(("job", 0, long))
        front_end.send(("job", 1, EmbedJob(Tokenized(prefix_ids=[[1]], text_ids=[[7]], suffix_ids=None))))
        front_end.close()

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    taken = []
    deadline = time.monotonic() + 60  # a bound on waiting, not a timing assertion
    while (inbox.peers or not taken) and time.monotonic() < deadline:
        taken += inbox.take(1.0)
    sender.join(timeout=60)
    assert [len(job.tokens.text_ids[0]) for job in taken] == [200_000, 1]
    assert engine.cancelled == taken and inbox.peers == []
    assert len(inbox.selector.get_map()) == 1 and model_end.closed  # only the wake-up pipe is left


def test_frames_are_cut_from_any_pieces_and_a_bad_one_is_skipped(caplog):
    # Whole messages in order however the bytes arrive (byte by byte here), the 12-byte header of a message over
    # 2 GiB (framed by hand: a real one is too big for a test), and a message that cannot be unpickled: logged,
    # consumed, and the ones after it still read.
    big = pickle.dumps("big")
    stream = frame(("job", 1, "a"))
    stream += struct.pack("!i", -1) + struct.pack("!Q", len(big)) + big
    stream += struct.pack("!i", 7) + b"garbage"
    stream += frame(("job", 2, "b"))
    frames, got = Frames(), []
    for i in range(len(stream)):
        frames.feed(stream[i : i + 1])
        got += frames.messages()
    assert got == [("job", 1, "a"), "big", ("job", 2, "b")] and not frames.buf
    assert "could not be read (7 bytes)" in caplog.text


def test_a_message_the_inbox_cannot_handle_is_refused_alone():
    # A broken message and a job whose check fails unexpectedly: each is logged and answered (the job with an
    # error), and the jobs around them are taken.
    engine = Engine(refused=[(6,)])
    inbox = PipeInbox(engine)
    model_end, front_end = multiprocessing.Pipe()
    inbox.attach(model_end, lambda why: None)
    front_end.send(("job", 0, _job(5)))
    front_end.send_bytes(b"not a pickle")
    front_end.send(("job", 1, _job(6)))
    front_end.send(("job", 2, _job(7)))
    taken = _take(inbox, 2)
    assert [job.tokens.text_ids for job in taken] == [[[5]], [[7]]]
    inbox.take(0.0)
    kind, ident, error = front_end.recv()
    assert (kind, ident) == ("failed", 1) and "could not take this request (RuntimeError)" in str(error)
    inbox.close()


def test_lengths_counted_by_the_front_end_are_the_ones_the_engine_sorts_by():
    crossed = pickle.loads(pickle.dumps(_job(5, 6, lengths=[9])))
    assert crossed.lengths == [9] and isinstance(crossed.future, Reply)


def test_answers_of_other_widths_travel_apart():
    a, b, c = (np.full((1, w), w, dtype=np.float32) for w in (3, 4, 3))
    messages = [("vectors", 0, a), ("vectors", 1, b), ("vectors", 2, c)]
    assert _stack(messages) == messages  # one width differs: nothing stacked
    stacked = _stack([("vectors", 0, a), ("event", 5, ("token", "x")), ("vectors", 2, c)])
    assert stacked[0] == ("event", 5, ("token", "x")) and stacked[1][0] == "stacked"
    assert stacked[1][2][:2] == ([0, 2], [1, 1]) and stacked[1][2][2].tolist() == [[3.0] * 3] * 2


def test_a_closed_inbox_holds_no_pipes_and_a_late_stop_is_harmless():
    inbox = PipeInbox(Engine())
    model_end, _front_end = multiprocessing.Pipe()
    inbox.attach(model_end, lambda why: None)
    inbox.take(0.0)
    sock = inbox.peers[0].sock
    inbox.close()
    inbox.close()  # again: nothing left to close
    inbox.put(object())  # a stop asked after close (FrontEnds.stop run twice) does not raise
    assert sock.fileno() == -1 and model_end.closed and inbox.wake_w.closed and inbox.peers == []


def test_the_pipe_stays_blocking_whatever_the_default_socket_timeout():
    # The model's process writes answers through the Connection that shares the socket read in bulk: that
    # file description must stay blocking, or a long answer would be cut when the front-end reads slowly.
    previous = socket.getdefaulttimeout()
    socket.setdefaulttimeout(0.5)
    try:
        inbox = PipeInbox(Engine())
        model_end, front_end = multiprocessing.Pipe()
        inbox.attach(model_end, lambda why: None)
        inbox.take(0.0)
        assert inbox.peers[0].sock.getblocking()
    finally:
        socket.setdefaulttimeout(previous)
    answer = np.zeros((2_000_000,), dtype=np.float32)  # 8 MB: more than the pipe holds
    reader = threading.Thread(target=lambda: got.append(front_end.recv()), daemon=True)
    got = []
    reader.start()
    inbox.peers[0].send(("health", 1, answer))
    inbox.flush()
    reader.join(timeout=60)
    assert got and np.array_equal(got[0][2], answer)
    inbox.close()
