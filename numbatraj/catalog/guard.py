"""Connection guards for the uvicorn server: a request-head deadline, named 400s, and the
open-file limit.

uvicorn's ``timeout_keep_alive`` runs only between requests, and is cancelled by any byte
received: a connection that sends nothing, or a request head one byte at a time, holds its
socket for ever.  :class:`GuardedH11Protocol` (uvicorn's h11 protocol, passed as ``http=``)
arms a deadline when a connection opens and after each response, and cancels it only when a
*complete* request head has arrived: a connection that has not sent one within
``head_timeout`` seconds is closed.  Its 400 for a malformed request says what h11 found
(``bad Content-Length``, ``illegal header line``...).
"""

from __future__ import annotations

import asyncio
import resource
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = ["GuardedH11Protocol", "raise_open_file_limit"]


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a deadline on each request head (``head_timeout`` s)."""

    #: Seconds a connection may take to send a complete request head.
    head_timeout = 5.0
    #: A request line plus headers larger than this is refused (h11 bounds only a head
    #: that is still incomplete).
    max_head_bytes = 32 << 10

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_timer: asyncio.TimerHandle | None = None
        self._bad_request: str | None = None
        next_event = self.conn.next_event

        def watched() -> Any:
            try:
                event = next_event()
            except h11.RemoteProtocolError as exc:
                self._bad_request = str(exc)
                raise
            if isinstance(event, h11.Request):
                self._disarm()
                size = len(event.target) + sum(len(k) + len(v) + 4 for k, v in event.headers)
                if size > self.max_head_bytes:
                    self._bad_request = (f"request head of {size} bytes exceeds "
                                         f"{self.max_head_bytes}")
                    raise h11.RemoteProtocolError(self._bad_request, 431)
            return event

        self.conn.next_event = watched  # type: ignore[method-assign]

    def _arm(self) -> None:
        self._disarm()
        self._head_timer = self.loop.call_later(self.head_timeout, self._head_expired)

    def _disarm(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_expired(self) -> None:
        self._head_timer = None
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def on_response_complete(self) -> None:
        if not self.transport.is_closing():
            self._arm()  # before the pipelined head (if any) is parsed, which disarms it
        super().on_response_complete()

    def send_400_response(self, msg: str) -> None:
        if self._bad_request:
            why = self._bad_request.encode("ascii", "replace").decode()
            msg = f"Invalid HTTP request received: {why}"
        super().send_400_response(msg)


def raise_open_file_limit() -> tuple[int, int]:
    """Raise the soft ``RLIMIT_NOFILE`` to the hard limit; returns ``(before, after)``."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    if target > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError):
            pass
    return soft, resource.getrlimit(resource.RLIMIT_NOFILE)[0]
