"""The base of the project's two small HTTP servers (metrics endpoint, in-memory API front).

The standard library's server prints a traceback to stderr for every client that hangs up
mid-request (a kubectl interrupted, a scrape timed out, a watch closed): noise for an operator
reading logs, and not an error of ours. This base logs what is worth logging instead, and sets
what both servers want: daemon threads, address reuse, and IPv6 when the host is an IPv6 address.
"""

from __future__ import annotations

import logging
import socket
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

log = logging.getLogger(__name__)


class QuietThreadingHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler]) -> None:
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        super().__init__(address, handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        error = sys.exc_info()[1]
        if isinstance(error, ConnectionError | TimeoutError):
            log.debug("client %s went away: %s", client_address, error)
            return
        log.error("error serving %s", client_address, exc_info=error)
