"""Which models to serve, and the config file watched while serving: TF Serving's
`--model_config_file` (read by graphserve.core.modelconfig) or one `--model-base-path` with
`--model-name`, and `--model_config_file_poll_wait_seconds` (ModelConfigWatcher).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

from graphserve.core.modelconfig import (
    ModelConfig,
    ModelConfigError,
    VersionPolicy,
    load_model_config_file,
)

__all__ = [
    "ModelConfig",
    "ModelConfigError",
    "ModelConfigWatcher",
    "VersionPolicy",
    "load_model_config_file",
]

log = logging.getLogger("graphserve.config")


class ModelConfigWatcher:
    """TF Serving's `--model_config_file_poll_wait_seconds`: re-read the model config file every
    `seconds` and hand the model list to `apply` each time it differs from the one applied last
    (`current` at first).

    A file that does not parse, or lists no models, is logged (once per distinct error) and
    skipped: the models serve on as they are until a good file is written.
    """

    def __init__(
        self,
        path: Path,
        seconds: float,
        apply: Callable[[list[ModelConfig]], None],
        current: Sequence[ModelConfig],
    ) -> None:
        self.path = Path(path)
        self.seconds = seconds
        self._apply = apply
        self._current = list(current)
        self._last_error = ""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def check(self) -> bool:
        """Read the file once and apply it if it changed; True when a new model list was
        applied."""
        try:
            models = load_model_config_file(self.path)
            if models == self._current:
                self._last_error = ""
                return False
            self._apply(models)  # raises ModelConfigError for what only the server checks
        except ModelConfigError as exc:
            if str(exc) != self._last_error:
                log.error("model config not reloaded, the models serve on as they are: %s", exc)
            self._last_error = str(exc)
            return False
        self._last_error = ""
        log.info("%s changed: serving %s", self.path, ", ".join(m.name for m in models))
        self._current = models
        return True

    def start(self) -> ModelConfigWatcher:
        """Poll in a daemon thread until `stop()`; with `seconds` 0 the file is read only once,
        at start-up, as in TF Serving."""
        if self.seconds > 0 and self._thread is None:
            self._thread = threading.Thread(
                target=self._loop, name="model-config-poll", daemon=True
            )
            self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(self.seconds):
            try:
                self.check()
            except Exception:  # never let one bad pass end polling
                log.exception("model config reload failed")

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
