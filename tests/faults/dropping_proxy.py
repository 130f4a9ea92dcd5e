"""A loopback TCP proxy that forwards a request, lets the server commit it, and then loses the answer: it closes the
client's connection when the server's response arrives, before the client reads it (what a timeout or a proxy's 502
after the commit does). The client sees a reset; the write is on the server.

`DroppingProxy(port, framer, drops)` listens on a free loopback port (`.port`) in front of `127.0.0.1:port`. The
framer cuts the client's bytes into requests: `HttpFramer` (one HTTP/1.1 request, e.g. to `mlflow server`), or
`PostgresFramer` (a PostgreSQL message; at a COMMIT the transaction's statements, as psycopg2 sends them: simple
queries). Each `Drop(name, match, times)` loses the answer of the first `times` requests `match` accepts;
`.dropped[name]` counts what it lost.
"""

from __future__ import annotations

import re
import socket
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

_NEGOTIATION = (80877103, 80877104)  # SSLRequest, GSSENCRequest: untyped, answered by one byte, before startup


@dataclass
class Drop:
    name: str
    match: Callable[[bytes], bool]
    times: int = 1


class HttpFramer:
    """HTTP/1.1 requests with a Content-Length body (what `requests` sends): each is matched whole."""

    def __init__(self) -> None:
        self.buf = b""

    def feed(self, data: bytes) -> list[tuple[bytes, bytes | None]]:
        self.buf += data
        out = []
        while (end := self.buf.find(b"\r\n\r\n")) >= 0:
            length = re.search(rb"(?im)^content-length:\s*(\d+)", self.buf[:end])
            total = end + 4 + (int(length.group(1)) if length else 0)
            if len(self.buf) < total:
                break
            request, self.buf = self.buf[:total], self.buf[total:]
            out.append((request, request))
        return out


class PostgresFramer:
    """PostgreSQL frontend messages; a COMMIT is matched by the statements of its transaction."""

    def __init__(self) -> None:
        self.buf, self.started, self.statements = b"", False, []

    def feed(self, data: bytes) -> list[tuple[bytes, bytes | None]]:
        self.buf += data
        out: list[tuple[bytes, bytes | None]] = []
        while True:
            if not self.started:  # untyped: int32 length, int32 code
                if len(self.buf) < 8 or len(self.buf) < int.from_bytes(self.buf[:4], "big"):
                    return out
                size = int.from_bytes(self.buf[:4], "big")
                self.started = int.from_bytes(self.buf[4:8], "big") not in _NEGOTIATION
                out.append((self.buf[:size], None))
                self.buf = self.buf[size:]
                continue
            if len(self.buf) < 5 or len(self.buf) < 1 + int.from_bytes(self.buf[1:5], "big"):
                return out
            size = 1 + int.from_bytes(self.buf[1:5], "big")
            message, self.buf = self.buf[:size], self.buf[size:]
            out.append((message, self._transaction(message)))

    def _transaction(self, message: bytes) -> bytes | None:
        if message[:1] != b"Q":
            return None
        query = message[5:].rstrip(b"\0").strip()
        if query.upper() == b"COMMIT":
            done, self.statements = b"\n".join(self.statements), []
            return done
        if query.upper() == b"ROLLBACK":
            self.statements = []
        else:
            self.statements.append(query)
        return None


class DroppingProxy:
    def __init__(self, port: int, framer: type, drops: list[Drop]) -> None:
        self.upstream, self.framer, self.drops = port, framer, drops
        self.dropped: Counter = Counter()
        self._lock = threading.Lock()
        self._listener = socket.socket()
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self.port = self._listener.getsockname()[1]
        self._open: list[socket.socket] = []

    def __enter__(self) -> DroppingProxy:
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def __exit__(self, *_: object) -> None:
        self._listener.close()
        for s in list(self._open):
            _close(s)

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:  # closed: the proxy is done
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _drop(self, request: bytes) -> bool:
        with self._lock:
            for drop in self.drops:
                if self.dropped[drop.name] < drop.times and drop.match(request):
                    self.dropped[drop.name] += 1
                    return True
        return False

    def _serve(self, client: socket.socket) -> None:
        try:
            upstream = socket.create_connection(("127.0.0.1", self.upstream))
        except OSError:
            _close(client)
            return
        self._open += [client, upstream]
        lose = threading.Event()  # set: the next answer is the one to lose

        def answers() -> None:
            try:
                while data := upstream.recv(1 << 16):
                    if lose.is_set():  # the server answered, so it committed: the client never hears it
                        break
                    client.sendall(data)
            except OSError:
                pass
            _close(client, upstream)

        threading.Thread(target=answers, daemon=True).start()
        framer = self.framer()
        try:
            while data := client.recv(1 << 16):
                for message, request in framer.feed(data):
                    if request is not None and self._drop(request):
                        lose.set()
                    upstream.sendall(message)
        except OSError:
            pass
        _close(client, upstream)


def _close(*sockets: socket.socket) -> None:
    for s in sockets:
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        s.close()
