"""M3, isolation: a pinned model's p99 from a client of its own while others ask for models that
stay resident, then for models that never are (every request loads one and evicts one)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tools.bench.many.plan import Run
from tools.bench.many.report import shown
from tools.bench.many.servers import REQUEST_TIMEOUT_S, Answer, Client, scrape, serving, timing

__all__ = ["hot_client", "isolation"]

ROOT = Path(__file__).resolve().parents[3]


def _closed_loop(address: str, models: Sequence[str], clients: int, seconds: float) -> list[Answer]:
    """`clients` threads asking `models` in turn (one shared cycle), each back to back."""
    lock = threading.Lock()
    answers: list[Answer] = []
    turn = iter(range(10**12))
    end = time.monotonic() + seconds

    def ask() -> None:
        client = Client(address)
        try:
            while time.monotonic() < end:
                with lock:
                    model = models[next(turn) % len(models)]
                answer = client.predict(model)
                with lock:
                    answers.append(answer)
        finally:
            client.close()

    threads = [threading.Thread(target=ask, daemon=True) for _ in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return answers


class _HotClient:
    """The hot model's closed loop in a process of its own (`hot_client`), so that the other
    clients' threads do not share its interpreter's lock; its answers, after `stop`."""

    def __init__(self, address: str, model: str, out: Path) -> None:
        self.out = out
        code = "from tools.bench.many.isolation import hot_client; hot_client()"
        command = [sys.executable, "-c", code, address, model, str(out)]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, cwd=ROOT, env=env)

    def stop(self) -> np.ndarray:
        """(sent at, ms, ok) rows."""
        assert self.process.stdin is not None
        self.process.stdin.close()
        if self.process.wait(timeout=REQUEST_TIMEOUT_S + 30) != 0:
            raise RuntimeError(f"the hot model's client exited with {self.process.returncode}")
        return np.load(self.out)


def hot_client() -> None:
    """M3's hot client, as `_HotClient` runs it: argv ADDRESS MODEL OUT; Predict back to back
    until stdin closes, then OUT (.npy) holds (time.monotonic() sent, ms, ok) per answer."""
    address, model, out = sys.argv[1:4]
    stop = threading.Event()

    def wait_for_eof() -> None:
        sys.stdin.read()
        stop.set()

    threading.Thread(target=wait_for_eof, daemon=True).start()
    client = Client(address)
    rows = []
    while not stop.is_set():
        answer = client.predict(model)
        rows.append((answer.at, answer.ms, 0.0 if answer.problem else 1.0))
    client.close()
    np.save(out, np.array(rows, dtype=np.float64).reshape(-1, 3))


def isolation(run: Run) -> dict[str, Any]:
    """M3: the pinned model asked back to back by its own client while `isolation_clients`
    others ask (a) the few models that stay resident, then (b) models that never are."""
    plan = run.plan
    hot, keep = run.names[0], plan.isolation_resident
    resident_set, cold_set = run.names[1:keep], run.names[keep:]
    flags = ["--max-resident-models", str(keep)]
    with serving(run.pinned_config, flags, run.log("isolation"), record=run.servers) as server:
        address = server.rest_address
        assert address is not None
        warm = Client(address)  # each resident-set model loads once, before the clock
        for model in resident_set:
            warm.predict(model)
        warm.close()
        client = _HotClient(address, hot, plan.work_dir / "hot.npy")
        try:
            time.sleep(1.0)  # its interpreter started and its first answers came
            phases = [
                _Phase.run(name, address, models, plan.isolation_clients, plan.isolation_phase_s)
                for name, models in (("resident", resident_set), ("cold", cold_set))
            ]
        finally:
            rows = client.stop()
    out: dict[str, Any] = {"hot_model": hot, "resident_set": len(resident_set),
                           "cold_set": len(cold_set), "phases": {}}  # fmt: skip
    for phase in phases:
        out["phases"][phase.name] = phase.summary(rows)
        hot_p99 = (out["phases"][phase.name]["hot"] or {}).get("p99_ms")
        run.say(f"M3 {phase.name}: hot p99 {shown(hot_p99)} ms, {phase.loads:.0f} loads")
    return out


@dataclass(frozen=True)
class _Phase:
    """One phase of M3: the other clients' answers, its clock, the server's loads during it."""

    name: str
    start: float
    end: float
    answers: list[Answer]
    loads: float

    @classmethod
    def run(
        cls, name: str, address: str, models: Sequence[str], clients: int, seconds: float
    ) -> _Phase:
        before = scrape(address)
        answers = _closed_loop(address, models, clients, seconds)
        after = scrape(address)
        return cls(name, before.at, after.at, answers, after.loads - before.loads)

    def summary(self, hot_rows: np.ndarray) -> dict[str, Any]:
        """Its figures, with the hot client's answers sent within it ((at, ms, ok) rows)."""
        seconds = self.end - self.start
        inside = hot_rows[(hot_rows[:, 0] >= self.start) & (hot_rows[:, 0] < self.end)]
        return {
            "seconds": round(seconds, 2),
            "hot": timing(inside[inside[:, 2] == 1.0, 1].tolist()),
            "hot_failures": int((inside[:, 2] == 0.0).sum()),
            "others": timing([a.ms for a in self.answers if not a.problem]),
            "others_requests": len(self.answers),
            "others_cold": sum(a.cold for a in self.answers),
            "others_failures": sum(bool(a.problem) for a in self.answers),
            "loads": self.loads,
            "loads_per_s": round(self.loads / seconds, 2) if seconds else None,
        }
