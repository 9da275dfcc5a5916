"""One thread per HTTP front noticing watch clients that hung up.

A watch streams while no events flow; a client that goes away is noticed only when a write
fails, which for a quiet resource may be never, so its handler thread and store watcher would
live forever. Each watch used to have a thread of its own polling its socket every half second:
a fleet benchmark's fronts held some 1,500 of them, each waking twice a second. Here one
thread per front waits on all its watches' sockets at once (``selectors``) and closes the
stream of a socket that reads end-of-file.

A well-behaved HTTP/1.1 client sends nothing while its watch is open; a socket that has data
is left out of the selector for ``recheck_seconds`` (it would read as ready at every select)
and looked at again after.
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import threading
import time
from typing import Protocol


class Closable(Protocol):
    def close(self) -> None: ...


class HangupMonitor:
    """Closes each registered stream whose socket's peer hung up."""

    def __init__(self, name: str, recheck_seconds: float = 0.5) -> None:
        self._name = name
        self._recheck = recheck_seconds
        self._selector = selectors.DefaultSelector()
        self._lock = threading.Lock()
        self._streams: dict[socket.socket, Closable] = {}
        self._parked: dict[socket.socket, float] = {}
        self._wakeup_r, self._wakeup_w = socket.socketpair()
        self._wakeup_r.setblocking(False)
        self._selector.register(self._wakeup_r, selectors.EVENT_READ)
        self._thread: threading.Thread | None = None
        self._closed = False
        self.hangups = 0
        """Streams closed because their client went away."""

    def watch(self, conn: socket.socket, stream: Closable) -> None:
        """Close ``stream`` once ``conn``'s client hangs up (until ``forget``)."""
        with self._lock:
            if self._closed:
                return
            self._streams[conn] = stream
            self._selector.register(conn, selectors.EVENT_READ)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
        self._wake()

    def forget(self, conn: socket.socket) -> None:
        """``conn``'s watch ended; stop looking at it (before the socket is closed)."""
        with self._lock:
            if self._streams.pop(conn, None) is not None and self._parked.pop(conn, None) is None:
                with contextlib.suppress(KeyError, ValueError, OSError):
                    self._selector.unregister(conn)

    def watched(self) -> int:
        with self._lock:
            return len(self._streams)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            thread = self._thread
        self._wake()
        if thread is not None:
            thread.join(timeout=5)
        with self._lock:
            self._selector.close()
            self._wakeup_r.close()
            self._wakeup_w.close()

    def _wake(self) -> None:
        with contextlib.suppress(OSError):
            self._wakeup_w.send(b"\0")

    def _run(self) -> None:
        while True:
            with self._lock:
                if self._closed:
                    return
                now = time.monotonic()
                for conn, until in list(self._parked.items()):
                    if until <= now:
                        del self._parked[conn]
                        with contextlib.suppress(KeyError, ValueError, OSError):
                            self._selector.register(conn, selectors.EVENT_READ)
                timeout = min(self._parked.values(), default=now + 60.0) - now
            ready = self._selector.select(max(0.0, timeout))
            hung: list[Closable] = []
            with self._lock:
                for key, _ in ready:
                    if key.fileobj is self._wakeup_r:
                        with contextlib.suppress(OSError):
                            self._wakeup_r.recv(4096)
                        continue
                    conn = key.fileobj  # type: ignore[assignment]
                    stream = self._streams.get(conn)
                    if stream is None:
                        continue
                    try:
                        data = conn.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
                    except BlockingIOError:
                        continue
                    except OSError:
                        data = b""
                    with contextlib.suppress(KeyError, ValueError, OSError):
                        self._selector.unregister(conn)
                    if data == b"":
                        del self._streams[conn]
                        hung.append(stream)
                    else:
                        self._parked[conn] = time.monotonic() + self._recheck
            for stream in hung:
                self.hangups += 1
                stream.close()
