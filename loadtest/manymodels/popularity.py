"""Which models a many-models load test calls, and how often: names from a model config file,
weights by Zipf's law over their order or from a file, and the seeded order of the picks.

    models = models_from_config(Path("copies/models.config"))  # [(name, base path)], in order
    popularity = Popularity.zipf(models, s=1.1)                   # rank r weighs 1 / r^s
    picks = Picks(popularity.weights, seed=0)                     # pick(i): request i's model

A weights file maps names to weights, as a JSON object or one "NAME WEIGHT" a line (blank lines
and lines starting with # are skipped). The i-th request a locust process sends goes to
`Picks.pick(i)`, drawn in blocks from a generator seeded with (seed, block): the same seed gives
the same models in the same order, so a run capped at N requests asks each model a known number
of times (`expected_counts`).

Only numpy and TF Serving's config proto are imported: the locust processes import this module.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from graphserve.core.errors import LoadTestError, ModelConfigError
from graphserve.core.modelconfig import load_model_config_file

__all__ = [
    "DEFAULT_ZIPF_S",
    "Picks",
    "Popularity",
    "expected_counts",
    "models_from_config",
    "read_weights",
    "zipf_weights",
]

DEFAULT_ZIPF_S = 1.1
_BLOCK = 4096  # picks drawn at once


@dataclass(frozen=True)
class Popularity:
    """The models to call, most popular first, with their shares (adding up to 1) and the base
    path each has in the model config (None: not known, or not on this machine)."""

    names: tuple[str, ...]
    weights: tuple[float, ...]
    base_paths: tuple[Path | None, ...]
    zipf_s: float | None = None  # None: the weights came from a file
    models_from: Path | None = None
    weights_file: Path | None = None

    @classmethod
    def zipf(
        cls, models: Sequence[tuple[str, Path | None]], s: float, models_from: Path | None = None
    ) -> Popularity:
        """The models in their order, the r-th weighted 1 / r^s."""
        if not models:
            raise LoadTestError("no models to call")
        return cls(
            names=tuple(name for name, _ in models),
            weights=tuple(zipf_weights(len(models), s)),
            base_paths=tuple(path for _, path in models),
            zipf_s=s,
            models_from=models_from,
        )

    @classmethod
    def from_weights(
        cls,
        weights: dict[str, float],
        weights_file: Path,
        models: Sequence[tuple[str, Path | None]] = (),
        models_from: Path | None = None,
    ) -> Popularity:
        """The models of `weights` with a weight above 0, heaviest first (ties in file order).
        With `models` (a config's), every name must be one of them. Raises LoadTestError."""
        paths = dict(models)
        if models:
            unknown = [name for name in weights if name not in paths]
            if unknown:
                raise LoadTestError(
                    f"--weights {weights_file}: {_few(unknown)} not in --models-from "
                    f"{models_from} (it names {_few(list(paths))})"
                )
        named = sorted(
            ((name, w) for name, w in weights.items() if w > 0), key=lambda item: -item[1]
        )
        total = sum(w for _, w in named)
        return cls(
            names=tuple(name for name, _ in named),
            weights=tuple(w / total for _, w in named),
            base_paths=tuple(paths.get(name) for name, _ in named),
            weights_file=weights_file,
            models_from=models_from,
        )

    def describe(self) -> str:
        """'Zipf s=1.1 over 1,000 models' or 'the weights of FILE (12 models)'."""
        if self.zipf_s is not None:
            return f"Zipf s={self.zipf_s:g} over {len(self.names):,} models in config order"
        return f"the weights of {self.weights_file} ({len(self.names):,} models)"


def zipf_weights(count: int, s: float) -> list[float]:
    """Shares of ranks 1..count, the r-th ∝ 1 / r^s, adding up to 1 (s 0: all alike)."""
    if count < 1 or not math.isfinite(s) or s < 0:
        raise LoadTestError(f"Zipf needs one model or more and s >= 0, got {count} and {s}")
    raw = 1.0 / np.arange(1, count + 1, dtype=np.float64) ** s
    return [float(w) for w in raw / raw.sum()]


def models_from_config(path: Path) -> list[tuple[str, Path | None]]:
    """The models of a TF Serving model config file, in order, each with its base path when
    that is a directory here (read as the graph server reads it: core.modelconfig). Raises
    LoadTestError naming what is wrong."""
    try:
        models = load_model_config_file(path)
    except ModelConfigError as exc:
        raise LoadTestError(f"--models-from: {exc}") from None
    return [(m.name, m.base_path if m.base_path.is_dir() else None) for m in models]


def read_weights(path: Path) -> dict[str, float]:
    """NAME -> weight from a JSON object or "NAME WEIGHT" lines. Raises LoadTestError naming the
    file and line when it cannot be read, a weight is not a number >= 0, a name repeats, or no
    weight is above 0."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise LoadTestError(f"--weights {path}: cannot be read: {exc}") from None
    pairs: list[tuple[str, object, str]] = []  # name, weight, where
    if text.lstrip().startswith("{"):
        try:
            document = json.loads(text)
        except ValueError as exc:
            raise LoadTestError(f"--weights {path}: not JSON: {exc}") from None
        pairs = [(str(name), value, f"key {name!r}") for name, value in document.items()]
    else:
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            parts = line.split()
            if len(parts) != 2:
                raise LoadTestError(
                    f"--weights {path}, line {number}: expected NAME WEIGHT, got {line.strip()!r}"
                )
            pairs.append((parts[0], parts[1], f"line {number}"))
    weights: dict[str, float] = {}
    for name, value, where in pairs:
        weight = _weight(value)
        if weight is None:
            raise LoadTestError(
                f"--weights {path}, {where}: the weight of {name!r} must be a number >= 0, "
                f"got {value!r}"
            )
        if name in weights:
            raise LoadTestError(f"--weights {path}, {where}: {name!r} is named twice")
        weights[name] = weight
    if not any(w > 0 for w in weights.values()):
        raise LoadTestError(f"--weights {path}: no model has a weight above 0")
    return weights


def _weight(value: object) -> float | None:
    if isinstance(value, bool):
        return None
    try:
        weight = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return weight if math.isfinite(weight) and weight >= 0 else None


def _few(names: Sequence[str]) -> str:
    shown = ", ".join(repr(n) for n in names[:5])
    return shown + (f" and {len(names) - 5:,} more" if len(names) > 5 else "")


class Picks:
    """The model of every request of one process, in send order: `pick(i)` for the i-th.

    Drawn `_BLOCK` at a time from a generator seeded with (seed, block), so it is the same
    for the same seed whatever the threads' timing. Safe from any thread without a lock: two
    threads that draw the same block draw the same numbers."""

    def __init__(self, weights: Sequence[float], seed: int) -> None:
        shares = np.asarray(weights, dtype=np.float64)
        self._p = shares / shares.sum()
        self._seed = seed
        self._blocks: dict[int, npt.NDArray[np.int64]] = {}

    def pick(self, index: int) -> int:
        block, offset = divmod(index, _BLOCK)
        drawn = self._blocks.get(block)
        if drawn is None:
            rng = np.random.default_rng([self._seed, block])
            drawn = rng.choice(self._p.size, size=_BLOCK, p=self._p)
            self._blocks[block] = drawn
            self._blocks.pop(block - 2, None)  # requests are sent roughly in order
        return int(drawn[offset])


def expected_counts(weights: Sequence[float], seed: int, requests: int) -> list[int]:
    """How many of the first `requests` picks go to each model."""
    picks = Picks(weights, seed)
    counts = np.bincount([picks.pick(i) for i in range(requests)], minlength=len(weights))
    return [int(c) for c in counts]
