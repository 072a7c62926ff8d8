"""One JSON request over REST for tests: (status, parsed body), errors included."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any


def post_json(url: str, body: Any) -> tuple[int, Any]:
    """POST `body` as JSON to `url`; the status and the parsed answer, 4xx/5xx included."""
    request = urllib.request.Request(url, data=json.dumps(body).encode())
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())
