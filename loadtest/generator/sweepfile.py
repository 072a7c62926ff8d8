"""The locustfile of `graphserve loadtest compare`: alternating A/B windows over a load sweep.

    GRAPHSERVE_PLAN=out/plan.json \
        locust -f loadtest/generator/sweepfile.py --headless --csv out/locust

The plan (loadtest/results/plan.py) lists the arms and the steps (closed loop: users; open
loop: target req/s). `SweepShape`, a locust LoadTestShape, sets the users of each step, and its
controller moves every user through the phases of the step together:

    warm-up A, warm-up B, window A0, window B0, window B1, window A1, window A2, window B2 ...

Each round reverses the order (A B, B A, ...), so a drift on a shared machine hits every arm alike
and no arm always runs right after another. After `min_windows` rounds a step ends when every arm
is stable (perf_analyzer's criterion: the last windows' throughput and p50 within the tolerance),
or at `max_windows`. Users switch arms between two requests, never mid-request, and a request
belongs to the phase in which it started.

Every request is recorded with its exact latency (perf_counter, not locust's rounded buckets); at
the end the controller writes OUT/raw/records.npz and OUT/raw/phases.json, which
`loadtest.analysis` turns into the report. Progress goes to OUT/events.jsonl, one JSON object per
line.

Distributed (`--workers N` on this machine, `--expect-workers N` from anywhere), locust runs a
master and workers, and everything travels over locust's messaging:

    worker -> master   graphserve_hello    host, pid, CPUs, versions (on joining)
    master -> worker   graphserve_plan     the plan, the request body (or a traffic file's
                                           bodies) and the current phase
    master -> worker   graphserve_phase    each phase as it starts
    worker -> master   graphserve_records  its requests, errors, CPU and (under traffic) the
                                           first answer of each arm to each record, every
                                           half second
    worker -> master   graphserve_refused  the plan's targets are remote and it may not load them

The master runs the controller. A worker that stops sending heartbeats is lost: its users move to
the others (locust's rebalancing), an open loop's rate is split again over those left, and the
run records when it was lost, so the report names the windows it missed.

TLS: a target of the plan says by its scheme whether it is dialed over TLS (`grpcs://`,
`https://`), and this process's environment with what (the options `loadtest compare` or
`loadtest worker` was given: ClientTls.to_env); a remote worker dials with its own command
line's options, as its files are on its own machine. The master scrapes `https://` metrics URLs
with the same options.

Under a traffic file (`compare --traffic`, plan.bodies_file), each arm is sent the file's
requests in their order, cycling (a process's users take the next in turn), and the first answer
of each arm to each record is kept, unparsed, for the report's answers check: OUT/raw/answers.bin
(generator/framed.py), keyed by record and arm.

This file imports neither TensorFlow nor the TF Serving protos: the request is pre-encoded.
"""

from __future__ import annotations

import json
import os
import platform
import socket
import time
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import gevent
import numpy as np
import psutil
from locust import LoadTestShape, events
from locust.env import Environment
from locust.runners import STATE_MISSING, MasterRunner, WorkerRunner

from graphserve import __version__
from graphserve.core.client import grpc_error_text
from graphserve.core.errors import RemoteTargetError
from graphserve.core.tls import ClientTls, split_scheme
from graphserve.loadtest.generator.framed import ANSWERS, read_requests, write_answers
from graphserve.loadtest.generator.scrape import scrape
from graphserve.loadtest.generator.senders import Bodies, Completed, RealLock
from graphserve.loadtest.generator.targets import check_loopback, scheme_tls
from graphserve.loadtest.generator.users import (
    LoopUser,
    RequestBudget,
    Schedule,
    Sender,
    Sent,
    Traffic,
    Turn,
    predict_sender,
)
from graphserve.loadtest.results.plan import PLAN_ENV, PLAN_FROM_MASTER, Plan
from graphserve.loadtest.results.run import Window
from graphserve.loadtest.results.stats import stability, window_summary

_FLUSH_S = 0.5
# The TLS options this process dials its TLS targets with, and scrapes https:// metrics with.
TLS = ClientTls.from_env()
# A worker given this in its environment may load targets off its own machine, when the
# master's plan allows them too (`graphserve loadtest worker --allow-remote`).
WORKER_ALLOW_REMOTE_ENV = "GRAPHSERVE_WORKER_ALLOW_REMOTE"


def _read_plan() -> Plan | None:
    """The plan from $GRAPHSERVE_PLAN; None on a worker, which gets it from the master."""
    path = os.environ.get(PLAN_ENV)
    if not path:
        raise SystemExit(
            f"loadtest/generator/sweepfile.py runs a plan written by `graphserve loadtest "
            f"compare`: set {PLAN_ENV} to its plan.json (or use "
            "loadtest/generator/locustfile.py for a plain run)"
        )
    if path == PLAN_FROM_MASTER:
        return None
    plan = Plan.load(Path(path))
    for arm in plan.arms:
        check_loopback(arm.target, plan.allow_remote)
    return plan


# On a worker these stay empty until the master's plan arrives (`_on_plan`); nothing reads them
# before: users idle while no phase names an arm, and phases are entered only with a plan.
PLAN: Plan = _read_plan()  # type: ignore[assignment]
BODY = Path(PLAN.body_file).read_bytes() if PLAN is not None else b""
BODIES: list[bytes] = (
    read_requests(Path(PLAN.bodies_file)) if PLAN is not None and PLAN.bodies_file else []
)
OUT = Path(PLAN.out_dir) if PLAN is not None else Path()


# ---------------------------------------------------------------------------------------------
# The phase every process follows, and the requests it records.


@dataclass(frozen=True)
class Phase:
    """What users do now. arm -1: nothing (between steps, or waiting for records)."""

    seq: int
    kind: str  # "idle" | "warmup" | "window"
    step: int
    window: int  # -1 outside measurement windows
    arm: int
    rate: float  # open loop: this process's arrivals per second
    started: float  # time.time()


class Local:
    """This process's view: the current phase, what its users send, and the requests recorded.

    The hub changes phases (each publishes what the users send: `traffic`) and records the
    requests; the users' threads (loadtest/generator/users.py) count theirs in flight through
    `begin` and `end`, which take `lock`.
    """

    def __init__(self) -> None:
        self.phase = Phase(seq=0, kind="idle", step=0, window=-1, arm=-1, rate=0.0, started=0.0)
        self.traffic: Traffic[Phase] = Traffic()
        self.lock = RealLock()
        self.columns: dict[str, list[float]] = {k: [] for k in _COLUMNS}
        self.errors: Counter[tuple[int, int, str]] = Counter()  # (arm, seq, message)
        self.in_flight: Counter[int] = Counter()  # seq -> requests not yet answered
        self.cpu: dict[int, float] = {}  # seq -> this process's CPU % during that phase
        self.machine_cpu: dict[int, float] = {}  # seq -> the machine's CPU % during that phase
        self._cpu_mark = (time.process_time(), time.time())
        self._machine_mark = _machine_times()
        self.cycles: list[Bodies] = []  # under traffic: each arm's place in the file
        self.answered: set[tuple[int, int]] = set()  # (record, arm) whose answer is kept
        self.answers: list[tuple[int, int, bytes]] = []  # kept since the last drain

    def bodies(self, arm: int) -> Bodies:
        """Arm `arm`'s cycle through the traffic file's requests, shared by this process's
        users (made on the hub, where every user's senders are)."""
        if not self.cycles:
            self.cycles = [Bodies(BODIES) for _ in PLAN.arms]
        return self.cycles[arm]

    def answer(self, arm: int, record: int, reply: bytes) -> None:
        """Keep `reply` if it is the first answer of `arm` to `record` (on a user's thread)."""
        key = (record, arm)
        if key in self.answered:
            return
        with self.lock:
            if key not in self.answered:
                self.answered.add(key)
                self.answers.append((record, arm, reply))

    def enter(self, phase: Phase) -> None:
        cpu, wall, machine = time.process_time(), time.time(), _machine_times()
        spent_wall = wall - self._cpu_mark[1]
        if spent_wall > 0:
            self.cpu[self.phase.seq] = 100.0 * (cpu - self._cpu_mark[0]) / spent_wall
        spent_machine = machine[1] - self._machine_mark[1]
        if spent_machine > 0:
            busy = machine[0] - self._machine_mark[0]
            self.machine_cpu[self.phase.seq] = 100.0 * busy / spent_machine
        self._cpu_mark, self._machine_mark = (cpu, wall), machine
        self._arrive(phase)

    def rerate(self, phase: Phase) -> None:
        """The same phase at a new open-loop rate (a worker was lost), arrivals from now on."""
        self._arrive(phase)

    def _arrive(self, phase: Phase) -> None:
        self.phase = phase
        if phase.arm < 0 and PLAN is not None and phase.step >= len(PLAN.loads):
            self.traffic.end()  # the run's last phase: the users end with their threads
            return
        if phase.arm < 0:
            self.traffic.publish(None)
            return
        schedule = None  # a closed loop: back to back
        if PLAN.mode == "open":
            seed = (PLAN.seed, phase.seq, os.getpid())
            poisson = PLAN.arrivals == "poisson"
            schedule = Schedule(phase.rate, phase.started, poisson=poisson, seed=seed)
        name = PLAN.arms[phase.arm].name
        self.traffic.publish(Turn(phase, name, phase.arm, schedule))

    def spent(self) -> bool:
        """The whole request budget has been sent (reservations do not count)."""
        return self.traffic.budget.spent

    def begin(self, seq: int) -> None:
        """A request of phase `seq` goes out now."""
        with self.lock:
            self.in_flight[seq] += 1

    def end(self, seq: int) -> None:
        """A request of phase `seq` has been answered and recorded."""
        with self.lock:
            self.in_flight[seq] -= 1

    def done_through(self) -> int:
        """The highest phase seq whose requests have all been answered here."""
        current = self.phase.seq
        with self.lock:
            busy = [seq for seq, n in self.in_flight.items() if n > 0]
        done = min(busy) - 1 if busy else current
        return done if self.phase.arm < 0 or busy else current - 1

    def record(self, arm: int, seq: int, start: float, ms: float, ok: bool, lag_ms: float) -> None:
        for key, value in zip(_COLUMNS, (arm, seq, start, ms, ok, lag_ms), strict=True):
            self.columns[key].append(value)

    def drain(self) -> dict[str, Any]:
        """Records, errors and CPU taken since the last drain (a worker sends them away)."""
        batch = {
            "columns": self.columns,
            "errors": [[a, s, m, n] for (a, s, m), n in self.errors.items()],
            "cpu": {str(k): v for k, v in self.cpu.items()},
            "machine_cpu": {str(k): v for k, v in self.machine_cpu.items()},
            "done_through": self.done_through(),
            "spent": self.spent(),
        }
        with self.lock:
            batch["answers"], self.answers = self.answers, []
        self.columns = {k: [] for k in _COLUMNS}
        self.errors = Counter()
        self.cpu, self.machine_cpu = {}, {}
        return batch


def _machine_times() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine, summed over its CPUs."""
    times = psutil.cpu_times()
    total = sum(times)
    idle = times.idle + getattr(times, "iowait", 0.0)
    return total - idle, total


_COLUMNS = ("arm", "seq", "start", "latency_ms", "ok", "lag_ms")
local = Local()


@events.request.add_listener
def _on_request(
    name: str, response_time: float, exception: Any, context: dict[str, Any], **kwargs: Any
) -> None:
    tag = context.get("graphserve") if context else None
    if tag is None:
        return
    arm, seq, lag_ms = tag
    start = float(kwargs.get("start_time") or time.time() - response_time / 1000)
    local.record(arm, seq, start, float(response_time), exception is None, lag_ms)
    if exception is not None:
        local.errors[(arm, seq, _error_text(arm, exception))] += 1


_explained: dict[tuple[int, str], str] = {}  # (arm, an error's text) -> the text with TLS's reason


def _error_text(arm: int, exception: BaseException) -> str:
    """An error as the report lists it; a gRPC connection that failed for TLS says why (the
    reason is looked for once per arm and text: it may take a handshake of its own)."""
    text = grpc_error_text(exception)
    if not text.startswith("UNAVAILABLE"):
        return text
    key = (arm, text)
    if key not in _explained:
        target = PLAN.arms[arm].target
        address = split_scheme(target)[0]
        _explained[key] = grpc_error_text(exception, address=address, tls=scheme_tls(target, TLS))
    return _explained[key]


# ---------------------------------------------------------------------------------------------
# The user: one request at a time to the current phase's arm.


class SweepUser(LoopUser):
    """Sends the plan's request to whichever arm the current phase names, from a real OS thread
    of its own with a connection of its own per arm (loadtest/generator/senders.py says why)."""

    traffic = local.traffic

    def senders(self) -> list[Sender]:
        return [
            predict_sender(
                PLAN.protocol,
                arm.target,
                local.bodies(index) if BODIES else BODY,
                timeout_s=PLAN.request_timeout_s,
                rest_path=PLAN.rest_path,
                max_message_bytes=-1,
                tls=scheme_tls(arm.target, TLS),
            )
            for index, arm in enumerate(PLAN.arms)
        ]

    def sending(self, turn: Turn[Phase]) -> None:
        local.begin(turn.tag.seq)

    def record(self, turn: Turn[Phase], sent: Sent) -> Completed:
        phase = turn.tag  # a request belongs to the phase in which it started
        if sent.record >= 0 and sent.error is None:
            local.answer(phase.arm, sent.record, sent.reply)
        tag = {"graphserve": (phase.arm, phase.seq, sent.lag_ms)}
        return sent.completed(turn.name, tag, lambda: local.end(phase.seq))  # once recorded


# ---------------------------------------------------------------------------------------------
# The controller (local process or master) and the messages of a distributed run.


@dataclass
class Collector:
    """Every request of the run, gathered from this process or from the workers.

    `columns` keeps the run for OUT/raw/records.npz; `windows` the same requests by (arm, phase
    seq), converted as their batch arrives, so that a window's summary, asked for after every
    round, costs its own requests and not the whole run's so far.
    """

    columns: dict[str, list[float]] = field(default_factory=lambda: {k: [] for k in _COLUMNS})
    windows: dict[tuple[int, int], list[tuple[np.ndarray, np.ndarray]]] = field(
        default_factory=lambda: defaultdict(list)
    )  # (arm, seq) -> chunks of (latency from the arrival in ms, ok)
    errors: Counter[tuple[int, int, str]] = field(default_factory=Counter)
    answers: dict[tuple[int, int], bytes] = field(default_factory=dict)  # (record, arm): first
    cpu: dict[int, dict[str, float]] = field(default_factory=lambda: defaultdict(dict))
    machine_cpu: dict[int, dict[str, float]] = field(default_factory=lambda: defaultdict(dict))
    done: dict[str, int] = field(default_factory=dict)  # process -> done_through
    spent: dict[str, bool] = field(default_factory=dict)
    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)  # worker -> who and where

    def add(self, node: str, batch: dict[str, Any]) -> None:
        columns = batch["columns"]
        for key in _COLUMNS:
            self.columns[key].extend(columns[key])
        self._file(columns)
        for arm, seq, message, count in batch["errors"]:
            self.errors[(int(arm), int(seq), str(message))] += int(count)
        for record, arm, reply in batch.get("answers", ()):
            self.answers.setdefault((int(record), int(arm)), bytes(reply))
        for seq, pct in batch["cpu"].items():
            self.cpu[int(seq)][node] = float(pct)
        for seq, pct in batch.get("machine_cpu", {}).items():
            self.machine_cpu[int(seq)][node] = float(pct)
        self.done[node] = int(batch["done_through"])
        self.spent[node] = bool(batch["spent"])
        if node in self.nodes:
            self.nodes[node]["last_seen"] = time.time()

    def _file(self, columns: dict[str, list[float]]) -> None:
        """One batch's requests into `windows` (a batch holds one or a few phases)."""
        arms = np.asarray(columns["arm"], dtype=np.int64)
        if arms.size == 0:
            return
        seqs = np.asarray(columns["seq"], dtype=np.int64)
        latency = np.asarray(columns["latency_ms"], dtype=np.float64) + np.asarray(
            columns["lag_ms"], dtype=np.float64
        )
        ok = np.asarray(columns["ok"], dtype=bool)
        keys = arms << 32 | seqs
        for key in np.unique(keys).tolist():
            chosen = keys == key
            self.windows[(key >> 32, key & 0xFFFFFFFF)].append((latency[chosen], ok[chosen]))

    def window(self, arm: int, seq: int) -> tuple[np.ndarray, np.ndarray]:
        """Latencies (ms, from the arrival) and ok flags of what one phase sent to one arm."""
        chunks = self.windows.get((arm, seq))
        if not chunks:
            return np.empty(0, dtype=np.float64), np.empty(0, dtype=bool)
        if len(chunks) > 1:  # joined once: asked again, the window costs nothing more
            chunks[:] = [
                (np.concatenate([c[0] for c in chunks]), np.concatenate([c[1] for c in chunks]))
            ]
        return chunks[0]


collector = Collector()
_current: dict[str, Any] = {}  # the phase the master's controller is in (for late joiners)
_events: Any = None  # OUT/events.jsonl, opened by the master or the local process


def emit(event: str, **data: Any) -> None:
    """One progress event to OUT/events.jsonl (the master or the local process only)."""
    global _events
    if _events is None:
        _events = (OUT / "events.jsonl").open("a", buffering=1)
    _events.write(json.dumps({"event": event, "time": time.time(), **data}) + "\n")


@events.init.add_listener
def _on_init(environment: Environment, **_: Any) -> None:
    runner = environment.runner
    if isinstance(runner, WorkerRunner):
        runner.register_message("graphserve_plan", _on_plan)
        runner.register_message("graphserve_phase", _on_phase)
        runner.send_message("graphserve_hello", _whoami())
        gevent.spawn(_flush_forever, runner)
    elif isinstance(runner, MasterRunner):
        runner.register_message("graphserve_hello", _on_hello)
        runner.register_message("graphserve_refused", _on_refused)
        runner.register_message("graphserve_records", _on_records)
    elif PLAN.max_requests:
        local.traffic.budget = RequestBudget(PLAN.max_requests)


def _whoami() -> dict[str, Any]:
    return {
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "graphserve": __version__,
    }


# -- on a worker


def _on_plan(environment: Environment, msg: Any, **_: Any) -> None:
    """The master's plan and body: check the targets, set the budget, join the current phase."""
    global PLAN, BODY, BODIES
    plan = Plan.from_dict(msg.data["plan"])
    allowed = plan.allow_remote and os.environ.get(WORKER_ALLOW_REMOTE_ENV) == "1"
    try:
        for arm in plan.arms:
            check_loopback(arm.target, allowed)
    except RemoteTargetError as exc:
        refusal = f"{exc} (a worker loads remote targets only with --allow-remote)"
        environment.runner.send_message("graphserve_refused", {**_whoami(), "message": refusal})  # type: ignore[union-attr]
        return
    PLAN, BODY = plan, bytes(msg.data["body"])
    BODIES = [bytes(body) for body in msg.data.get("bodies") or ()]
    if plan.max_requests:
        local.traffic.budget = RequestBudget(max(1, plan.max_requests // max(1, plan.workers)))
    if msg.data.get("phase"):
        local.enter(Phase(**msg.data["phase"]))


def _on_phase(environment: Environment, msg: Any, **_: Any) -> None:
    if PLAN is None:  # joined mid-run: the plan, when it comes, carries the current phase
        return
    phase = Phase(**msg.data)
    if phase.seq == local.phase.seq:
        local.rerate(phase)
    else:
        local.enter(phase)


def _flush_forever(runner: WorkerRunner) -> None:
    while True:
        gevent.sleep(_FLUSH_S)
        runner.send_message("graphserve_records", local.drain())


# -- on the master


def _on_hello(environment: Environment, msg: Any, **_: Any) -> None:
    node = str(msg.node_id)
    collector.nodes[node] = {**msg.data, "joined": time.time(), "last_seen": time.time()}
    reply = {
        "plan": PLAN.to_dict(),
        "body": BODY,
        "bodies": BODIES,
        "phase": dict(_current) or None,
    }
    environment.runner.send_message("graphserve_plan", reply, client_id=node)  # type: ignore[union-attr]
    emit(
        "worker",
        id=node,
        host=msg.data.get("host"),
        pid=msg.data.get("pid"),
        joined=len(collector.nodes),
        expected=PLAN.workers,
    )


def _on_refused(environment: Environment, msg: Any, **_: Any) -> None:
    data = msg.data
    emit("worker_refused", id=str(msg.node_id), host=data.get("host"), message=data["message"])


def _on_records(environment: Environment, msg: Any, **_: Any) -> None:
    collector.add(str(msg.node_id), msg.data)


class Controller:
    """Runs the plan's phases in the local process or the master, timed by gevent."""

    def __init__(self, environment: Environment) -> None:
        self.env = environment
        self.distributed = isinstance(environment.runner, MasterRunner)
        self.users = 0
        self.finished = False
        self.truncated = ""
        self.seq = 0
        self.phases: list[dict[str, Any]] = []
        self.scrapes: list[dict[str, Any]] = []
        self.lost: dict[str, float] = {}  # worker -> when the master noticed it was gone
        psutil.cpu_percent()  # the first call only starts psutil's clock

    # -- the plan

    def run(self) -> None:
        try:
            if self.distributed and not self._wait_for_workers():
                return
            for step, load in enumerate(PLAN.loads):
                if not self._step(step, load):
                    break
        except Exception as exc:  # recorded, then the run ends with what it has
            self.truncated = f"controller failed: {type(exc).__name__}: {exc}"
            self._emit("error", message=self.truncated)
        finally:
            self._enter("idle", step=len(PLAN.loads), window=-1, arm=-1)
            self._settle()
            self._write()
            self.finished = True

    def _step(self, step: int, load: float) -> bool:
        self.users = PLAN.users(load)
        self._emit("step", step=step, load=load, users=self.users)
        self._wait_for_users(self.users)
        self._scrape_all("step_start", step)
        for arm in range(len(PLAN.arms)):
            if not self._phase("warmup", step, -1, arm, PLAN.warmup_s):
                return False
        order = list(range(len(PLAN.arms)))
        windows: dict[int, list[int]] = defaultdict(list)  # arm -> seqs of its windows
        for window in range(PLAN.max_windows):
            for arm in order if window % 2 == 0 else order[::-1]:
                windows[arm].append(self.seq + 1)
                if not self._phase("window", step, window, arm, PLAN.window_s):
                    return False
            if window + 1 >= PLAN.min_windows:
                self._enter("idle", step=step, window=-1, arm=-1)
                self._settle()
                if self._stable(step, windows):
                    break
        self._enter("idle", step=step, window=-1, arm=-1)
        self._settle()
        self._scrape_all("step_end", step)
        self._emit("step_done", step=step, load=load)
        return True

    def _phase(self, kind: str, step: int, window: int, arm: int, seconds: float) -> bool:
        """Run one phase; False when the request budget is spent (the run ends)."""
        self._scrape(arm, "phase_start", step, self.seq + 1)
        self._enter(kind, step=step, window=window, arm=arm)
        self._emit("phase", kind=kind, step=step, window=window, arm=PLAN.arms[arm].name)
        seq = self.seq
        deadline = time.time() + seconds
        while time.time() < deadline:
            if self._spent():
                self.truncated = f"max requests ({PLAN.max_requests}) reached"
                return False
            if self.distributed and not self._watch_workers():
                self.truncated = "every load-test worker was lost"
                return False
            gevent.sleep(min(0.05, max(0.0, deadline - time.time())))
        self._scrape(arm, "phase_end", step, seq)
        return True

    def _stable(self, step: int, windows: dict[int, list[int]]) -> bool:
        """Each arm's last `min_windows` windows within the tolerance, as perf_analyzer checks."""
        all_stable = True
        for arm, seqs in windows.items():
            summaries = [self._window_summary(arm, seq) for seq in seqs]
            stable, _ = stability(
                summaries, last=PLAN.min_windows, tolerance_pct=PLAN.stability_pct
            )
            all_stable = all_stable and stable
            last = summaries[-1]
            self._emit(
                "window",
                step=step,
                arm=PLAN.arms[arm].name,
                window=len(seqs) - 1,
                requests=last.requests,
                rps=last.throughput_rps,
                p50_ms=last.p50_ms,
                stable=stable,
            )
        return all_stable

    def _window_summary(self, arm: int, seq: int) -> Window:
        if not self.distributed:
            collector.add("local", local.drain())
        latency, ok = collector.window(arm, seq)
        phase = self.phases[seq - 1]
        return window_summary(latency, ok, phase["started"], phase["ended"])

    # -- phases, users and records

    def _enter(self, kind: str, *, step: int, window: int, arm: int) -> None:
        now = time.time()
        if self.phases and self.phases[-1]["ended"] is None:
            self.phases[-1]["ended"] = now
            self.phases[-1]["machine_cpu_pct"] = psutil.cpu_percent()
        self.seq += 1
        workers = self._workers()
        phase = Phase(self.seq, kind, step, window, arm, self._rate(step, arm, workers), now)
        running = self.env.runner.user_count if self.env.runner is not None else None
        self.phases.append(
            {
                **asdict(phase),
                "ended": None,
                "users": self.users,
                "running_users": running,  # as the workers last reported them
                "workers": workers or None,
            }
        )
        _current.clear()
        _current.update(asdict(phase))
        if self.distributed:
            self.env.runner.send_message("graphserve_phase", asdict(phase))  # type: ignore[union-attr]
        else:
            local.enter(phase)

    def _rate(self, step: int, arm: int, workers: list[str]) -> float:
        """An open loop's arrivals per second for each process now sending them."""
        if PLAN.mode != "open" or arm < 0:
            return 0.0
        load = PLAN.loads[min(step, len(PLAN.loads) - 1)]
        return load / max(1, len(workers)) if self.distributed else load

    def _settle(self, timeout_s: float = 5.0) -> None:
        """Wait until every request started before now has been answered and recorded."""
        target = self.seq - 1
        deadline = time.time() + timeout_s
        while time.time() < deadline:
            if self.distributed:
                workers = self._workers()
                if workers and all(collector.done.get(w, -1) >= target for w in workers):
                    return
            elif local.done_through() >= target:
                return
            gevent.sleep(0.02)
        self._emit("warning", message=f"requests still unanswered after {timeout_s:g} s")

    def _wait_for_users(self, users: int, timeout_s: float = 30.0) -> None:
        deadline = time.time() + timeout_s
        runner = self.env.runner
        while time.time() < deadline and runner is not None:
            if runner.user_count >= users:
                return
            gevent.sleep(0.05)
        self._emit("warning", message=f"only {runner and runner.user_count} of {users} users")

    def _workers(self) -> list[str]:
        """The workers alive now: connected, sending heartbeats, and given the plan."""
        runner = self.env.runner
        if not isinstance(runner, MasterRunner):
            return []
        return sorted(
            str(client.id)
            for client in runner.clients.values()
            if client.state != STATE_MISSING and str(client.id) in collector.nodes
        )

    def _wait_for_workers(self) -> bool:
        """Until every expected worker has said hello (locust waited for them to connect)."""
        deadline = time.time() + PLAN.workers_timeout_s
        while len(collector.nodes) < PLAN.workers:
            if time.time() > deadline:
                self.truncated = (
                    f"{len(collector.nodes)} of {PLAN.workers} workers joined within "
                    f"{PLAN.workers_timeout_s:g} s"
                )
                return False
            gevent.sleep(0.05)
        return True

    def _watch_workers(self) -> bool:
        """Notice the workers lost since the last look; False when none is left.

        A lost worker's users move to the others (locust's rebalancing); an open loop's
        current phase is sent again at the rate split over the workers left.
        """
        alive = self._workers()
        gone = [w for w in collector.nodes if w not in alive and w not in self.lost]
        for worker in gone:
            self.lost[worker] = time.time()
            node = collector.nodes[worker]
            phase = self.phases[-1] if self.phases else {}
            self._emit(
                "warning",
                message=f"worker {worker} ({node.get('host')}, pid {node.get('pid')}) was lost "
                f"in phase {phase.get('seq')} ({phase.get('kind')}); {len(alive)} left",
            )
        if gone and alive and PLAN.mode == "open" and _current.get("arm", -1) >= 0:
            rate = self._rate(_current["step"], _current["arm"], alive)
            _current["rate"], _current["started"] = rate, time.time()
            self.env.runner.send_message("graphserve_phase", dict(_current))  # type: ignore[union-attr]
        return bool(alive)

    def _spent(self) -> bool:
        if not PLAN.max_requests:
            return False
        if self.distributed:
            workers = self._workers()
            return bool(workers) and all(collector.spent.get(w, False) for w in workers)
        return local.spent()

    # -- metrics, progress and the files

    def _scrape(self, arm: int, moment: str, step: int, seq: int) -> None:
        """Record the arm's server counters now (nothing when it has no metrics endpoint)."""
        url = PLAN.arms[arm].metrics_url
        snapshot = scrape(url, PLAN.model_name, tls=TLS) if url else None
        if snapshot is not None:
            self.scrapes.append(
                {"arm": arm, "moment": moment, "step": step, "seq": seq, **asdict(snapshot)}
            )

    def _scrape_all(self, moment: str, step: int) -> None:
        for arm in range(len(PLAN.arms)):
            self._scrape(arm, moment, step, -1)

    def _emit(self, event: str, **data: Any) -> None:
        emit(event, **data)

    def _write(self) -> None:
        if not self.distributed:
            collector.add("local", local.drain())
        raw = OUT / "raw"
        raw.mkdir(parents=True, exist_ok=True)
        columns = collector.columns
        phase_of = {p["seq"]: p for p in self.phases}
        seq = np.asarray(columns["seq"], dtype=np.int64)
        np.savez_compressed(
            raw / "records.npz",
            arms=np.asarray([a.name for a in PLAN.arms]),
            arm=np.asarray(columns["arm"], dtype=np.int16),
            step=np.asarray([phase_of[s]["step"] for s in seq.tolist()], dtype=np.int16),
            window=np.asarray([phase_of[s]["window"] for s in seq.tolist()], dtype=np.int16),
            seq=seq.astype(np.int32),
            start=np.asarray(columns["start"], dtype=np.float64),
            latency_ms=np.asarray(columns["latency_ms"], dtype=np.float64),
            ok=np.asarray(columns["ok"], dtype=bool),
            lag_ms=np.asarray(columns["lag_ms"], dtype=np.float64),
        )
        if self.distributed:
            self._generator_machines()
        document = {
            "phases": self.phases,
            "scrapes": self.scrapes,
            "cpu": {str(seq): by_node for seq, by_node in collector.cpu.items()},
            "machine_cpu": {str(seq): by_node for seq, by_node in collector.machine_cpu.items()},
            "errors": [[a, s, m, n] for (a, s, m), n in collector.errors.items()],
            "truncated": self.truncated,
            "workers": self._workers() if self.distributed else ["local"],
            "expected_workers": PLAN.workers,
            "nodes": {
                worker: {**node, "lost": self.lost.get(worker)}
                for worker, node in collector.nodes.items()
            },
        }
        if PLAN.bodies_file:
            write_answers(raw / ANSWERS, collector.answers)
        (raw / "phases.json").write_text(json.dumps(document, indent=1))
        self._emit("done", truncated=self.truncated)

    def _generator_machines(self) -> None:
        """A distributed phase's machine CPU is the busiest worker machine's, where the users
        ran (the master's own machine is kept as master_machine_cpu_pct)."""
        for phase in self.phases:
            phase["master_machine_cpu_pct"] = phase.get("machine_cpu_pct")
            machines = collector.machine_cpu.get(phase["seq"], {})
            phase["machine_cpu_pct"] = max(machines.values()) if machines else None


class SweepShape(LoadTestShape):
    """The plan's users per step; the controller greenlet moves them through the phases."""

    def __init__(self) -> None:
        super().__init__()
        self.controller: Controller | None = None

    def tick(self) -> tuple[int, float] | None:
        if self.controller is None:
            assert self.runner is not None
            self.controller = Controller(self.runner.environment)
            gevent.spawn(self.controller.run)
            return PLAN.users(PLAN.loads[0]), _spawn_rate(PLAN.users(PLAN.loads[0]))
        if self.controller.finished:
            return None
        users = max(1, self.controller.users)
        return users, _spawn_rate(users)


def _spawn_rate(users: int) -> float:
    return float(max(users, 1))  # every user of a step starts within a second
