"""The pipes between the front-ends and the model's process: their framing, and a front-end's end of one.

Both ends speak :class:`multiprocessing.connection.Connection`'s framing (a 4-byte big-endian length, or -1 and
an 8-byte length, then the pickled message). The model's process writes with a plain ``Connection`` and reads
in bulk (:class:`Frames` over every byte that has come, see :mod:`nosink.serve.processes`); a front-end's end
(:class:`Channel`) reads and writes the same socket, made non-blocking, from its event loop. Writes are
buffered and flushed as the socket takes them, so a front-end never blocks on a model's process that is busy
sending it answers, and neither side can wait on the other.
"""

import asyncio
import logging
import os
import pickle
import socket
import struct
import threading
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

_BIG = 0x7FFFFFFF

logger = logging.getLogger(__name__)


def frame(message: Any) -> bytes:
    """``message`` pickled and framed as :class:`multiprocessing.connection.Connection` frames it."""
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    if len(data) > _BIG:
        return struct.pack("!i", -1) + struct.pack("!Q", len(data)) + data
    return struct.pack("!i", len(data)) + data


class Frames:
    """Bytes read from a pipe's socket, cut into the messages :func:`frame` (or a ``Connection``) framed."""

    def __init__(self) -> None:
        self.buf = bytearray()

    def feed(self, chunk: bytes) -> None:
        """Add bytes just read."""
        self.buf += chunk

    def messages(self) -> list[Any]:
        """Every whole message read so far, unpickled, in order (a partial one waits for its rest).

        A message that cannot be unpickled is logged and skipped: it is consumed like any other, so it can
        neither be read again nor hold back the messages after it.
        """
        buf, at, out = self.buf, 0, []
        while len(buf) - at >= 4:
            (size,) = struct.unpack_from("!i", buf, at)
            head = 4
            if size == -1:
                if len(buf) - at < 12:
                    break
                (size,) = struct.unpack_from("!Q", buf, at + 4)
                head = 12
            if len(buf) - at - head < size:
                break
            start, at = at + head, at + head + size
            try:
                out.append(pickle.loads(memoryview(buf)[start:at]))
            except Exception:
                logger.exception("a message on a pipe could not be read (%d bytes); it is skipped", size)
        del buf[:at]
        return out


class Channel:
    """Messages to and from the model's process over ``conn``'s socket, in ``loop``.

    Args:
        conn: this process's end of the pipe (its socket is taken over; ``conn`` is closed).
        loop: the event loop that reads and writes it.
        receive: called in the loop with each message that arrives.
        lost: called in the loop once, when the other end is gone.
    """

    def __init__(
        self,
        conn: Connection,
        loop: asyncio.AbstractEventLoop,
        receive: Callable[[Any], None],
        lost: Callable[[], None],
    ) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM, fileno=os.dup(conn.fileno()))
        conn.close()
        self.sock.setblocking(False)
        self.loop, self.receive, self.lost = loop, receive, lost
        self.incoming = Frames()
        self.outgoing = bytearray()
        self.lock = threading.Lock()  # send() may be called off the loop (a health question)
        self.writing = False
        self.closed = False
        loop.add_reader(self.sock.fileno(), self._readable)

    def send(self, message: Any) -> None:
        """Queue ``message`` and write what the socket takes now (never blocks).

        Raises:
            OSError: if the channel is closed.
        """
        data = frame(message)
        with self.lock:
            if self.closed:
                raise OSError("the channel is closed")
            self.outgoing += data
            if not self.writing:
                self._flush()

    def close(self) -> None:
        """Stop reading and writing (call it in the loop)."""
        with self.lock:
            if self.closed:
                return
            self.closed = True
        self.loop.remove_reader(self.sock.fileno())
        if self.writing:
            self.loop.remove_writer(self.sock.fileno())
        self.sock.close()

    def _flush(self) -> None:
        """Write what the socket takes (holding the lock); wait for it to be writable if it takes less."""
        try:
            while self.outgoing:
                sent = self.sock.send(self.outgoing)
                del self.outgoing[:sent]
        except BlockingIOError:
            pass
        except OSError:
            self.outgoing.clear()
            self.loop.call_soon_threadsafe(self._gone)
            return
        wanted = bool(self.outgoing)
        if wanted != self.writing:
            self.writing = wanted
            if wanted:
                self.loop.call_soon_threadsafe(self.loop.add_writer, self.sock.fileno(), self._writable)
            else:
                self.loop.call_soon_threadsafe(self.loop.remove_writer, self.sock.fileno())

    def _writable(self) -> None:
        with self.lock:
            if not self.closed:
                self.writing = False  # re-armed by _flush if more is left
                self.loop.remove_writer(self.sock.fileno())
                self._flush()

    def _readable(self) -> None:
        try:
            while True:
                chunk = self.sock.recv(1 << 20)
                if not chunk:
                    self._gone()
                    return
                self.incoming.feed(chunk)
        except BlockingIOError:
            pass
        except OSError:
            self._gone()
            return
        for message in self.incoming.messages():
            self.receive(message)

    def _gone(self) -> None:
        if not self.closed:
            self.close()
            self.lost()
