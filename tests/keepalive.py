"""A REST client on one keep-alive connection, reopened whenever the server closes it: how load
generators talk to a server, so the soak and fuzz tests exercise connection reuse too."""

from __future__ import annotations

import http.client
from collections.abc import Mapping

__all__ = ["KeepAliveClient"]


class KeepAliveClient:
    def __init__(self, address: str, timeout: float = 30.0) -> None:
        host, port = address.rsplit(":", 1)
        self.host, self.port, self.timeout = host, int(port), timeout
        self.conn: http.client.HTTPConnection | None = None

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def post(
        self, path: str, body: bytes, headers: Mapping[str, str] | None = None
    ) -> tuple[int, bytes]:
        """POST as JSON; (status, body). A failed exchange closes the connection and raises."""
        if self.conn is None:
            self.conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        try:
            self.conn.request(
                "POST", path, body, {"Content-Type": "application/json", **(headers or {})}
            )
            response = self.conn.getresponse()
            payload = response.read()
        except (OSError, http.client.HTTPException):
            self.close()
            raise
        if response.will_close:
            self.close()
        return response.status, payload
