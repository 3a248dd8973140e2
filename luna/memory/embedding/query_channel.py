"""A turn's query vectors over a socket of their own, written and read by the event loop.

Why: through the process pool a query passes two helper threads of Luna's process (the pool's
queue feeder, which writes the request, and its manager, which reads the answer), and each
needs the GIL while the event loop and the database threads of the same turn hold it; piped
turns measured 2 ms more CPU per turn in Luna's process that way. Here the event loop writes
the request itself and reads the answer when the socket is readable (0.45 ms on top of the
worker's own encode, in both directions); in the worker a thread of its own, at normal
priority, answers.

Invariants:
- One request at a time: :attr:`QueryChannel.is_free` is False while one is out, and a caller
  that finds it busy uses the pool instead (never waits behind another caller).
- Frames are a 4-byte big-endian length and a pickle. Each request carries a number and its
  answer the same one; the answer to a request whose caller was cancelled is read and dropped
  by the next request, so no caller ever gets another's vector.
- Never blocks the loop: the socket is non-blocking and used through ``loop.sock_sendall`` and
  ``loop.sock_recv``; a request is written by a shielded task, so a cancelled caller never
  leaves half a frame in the socket.
- The worker's end closes when the worker process dies: end of file is
  :class:`WorkerDiedError` (a MemoryStoreError), and the channel stays broken (the next pool,
  started with the next worker, has a channel of its own). :meth:`QueryChannel.close` while a
  request is out closes the socket when that request is done, never under the loop's reader.
"""

from __future__ import annotations

import asyncio
import pickle
import socket
import struct
from collections.abc import Callable
from typing import Any

from luna.errors import MemoryStoreError

_HEADER = struct.Struct("!I")
READ_SIZE = 65536


class WorkerDiedError(MemoryStoreError):
    """The embedding process died (killed, out of memory); a new one can be started."""


def _frame(value: Any) -> bytes:
    payload = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    return _HEADER.pack(len(payload)) + payload


class QueryChannel:
    """Luna's end of one worker's query socket (the worker's end is :attr:`worker_end`)."""

    def __init__(self) -> None:
        self.sock, self.worker_end = socket.socketpair()
        self.sock.setblocking(False)
        self._number = 0
        self._buffer = bytearray()
        self._busy = False
        self.broken = False

    @property
    def is_free(self) -> bool:
        return not self._busy and not self.broken

    def worker_started(self) -> None:
        """Close this process's copy of the worker's end (the worker holds its own), so the
        worker's death reads as end of file here."""
        self.worker_end.close()

    def close(self) -> None:
        """Stop taking requests; the socket closes now, or when the request out is done."""
        self.broken = True
        if not self._busy:
            self.sock.close()
            self.worker_end.close()

    def _free(self) -> None:
        self._busy = False
        if self.broken:
            self.close()

    async def encode(self, texts: list[str]) -> Any:
        """The worker's vectors for ``texts`` (or the exception the worker raised)."""
        loop = asyncio.get_running_loop()
        self._busy = True
        freed_here = True
        try:
            self._number += 1
            number = self._number
            sending = loop.create_task(loop.sock_sendall(self.sock, _frame((number, texts))))
            try:
                await asyncio.shield(sending)
            except asyncio.CancelledError:
                freed_here = False  # the frame still goes out whole; then the channel is free
                sending.add_done_callback(self._sent)
                raise
            while True:
                answer, ok, value = pickle.loads(await self._read_frame(loop))
                if answer == number:
                    break
        except OSError as exc:
            self.broken = True
            raise WorkerDiedError("the embedding worker process died") from exc
        finally:
            if freed_here:
                self._free()
        if not ok:
            raise value
        return value

    def _sent(self, sending: asyncio.Task[None]) -> None:
        if sending.cancelled() or sending.exception() is not None:
            self.broken = True
        self._free()

    async def _read_frame(self, loop: asyncio.AbstractEventLoop) -> bytes:
        buf = self._buffer
        while True:
            if len(buf) >= _HEADER.size:
                (size,) = _HEADER.unpack_from(buf)
                end = _HEADER.size + size
                if len(buf) >= end:
                    frame = bytes(buf[_HEADER.size : end])
                    del buf[:end]
                    return frame
            data = await loop.sock_recv(self.sock, READ_SIZE)
            if not data:
                self.broken = True
                raise WorkerDiedError("the embedding worker process died")
            buf += data


def serve(sock: socket.socket, encode: Callable[[list[str]], Any]) -> None:
    """Answer query frames on ``sock`` until it closes (a daemon thread in the worker)."""
    with sock, sock.makefile("rb") as reader:
        while True:
            header = reader.read(_HEADER.size)
            if len(header) < _HEADER.size:
                return  # Luna's end closed: the pool is shutting down
            number, texts = pickle.loads(reader.read(_HEADER.unpack(header)[0]))
            try:
                answer = _frame((number, True, encode(texts)))
            except Exception as exc:  # the caller gets it, as through the pool
                try:
                    answer = _frame((number, False, exc))
                except Exception:  # an exception that does not pickle
                    answer = _frame((number, False, MemoryStoreError(str(exc))))
            try:
                sock.sendall(answer)
            except OSError:
                return  # Luna's end is gone
