"""TF Serving's batching settings, found by measurement: `graphserve tune batching`.

TF Serving's batching guide leaves `max_batch_size`, `batch_timeout_micros`, `num_batch_threads`
and `allowed_batch_sizes` to experiment. This runs the experiment: each candidate is served and
loaded by `--clients` closed-loop users (a single-arm `loadtest compare`: the same payload,
windows and exact latencies as any load test), and the best that holds the `--slo` gates is
written as `batching_parameters.txt`, the text proto TF Serving's `--batching_parameters_file`
(and `graphserve serve graph --batching-parameters-file`) reads.

How a candidate is served is how TF Serving changes batching while it runs: with
`--enable_per_model_batching_parameters`, a SavedModel version directory may carry its own
`batching_params.pbtxt`. Each candidate is a new version (the model's files hard-linked, plus
that file); the server picks it up, loads it, and it takes the traffic. `num_batch_threads` is
the server's own (a thread pool shared by every model), so trying another value restarts the
server the tuner started; a running TF Serving (`--address`) keeps its own.

The search (model_analyzer's "quick" mode, one knob at a time): start from TF Serving's CPU
recipe (threads = cores, timeout 0, max_batch_size = clients), try each value of one knob
keeping the others, keep the best, move to the next knob; passes repeat while the best gains
more than 5%, until `--budget` runs out. Best: holds the gates (and fails nothing), then the
most throughput; within 2% of each other, the lower p99. Batching off is measured first, as the
line every candidate is read against (self-managed only).

A running server over TLS (`--address grpcs://...`, or the --tls-* options: `TuneSpec.tls`) is
loaded and polled with the same options; the tuner's own server serves plaintext.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from graphserve.core.batchingparams import PER_MODEL_BATCHING_FILE, BatchingParameters
from graphserve.core.errors import LoadTestError, ServerStartError, SloError
from graphserve.core.tls import ClientTls
from graphserve.loadtest.comparison.findmax import first_gate_value, held_load
from graphserve.loadtest.comparison.run import Arm, CompareSpec, LoadSpec, compare, model_name_of
from graphserve.loadtest.results.labels import NONE
from graphserve.loadtest.results.run import Report

__all__ = [
    "Candidate",
    "Trial",
    "TuneResult",
    "TuneSpec",
    "candidates_for",
    "tune_batching",
]

_GAIN = 0.05  # another pass only when the last one gained more than this
_TIE = 0.02  # throughputs this close are a tie, broken by the lower p99
_POLL_S = 0.5  # the tuner's own server looks for new versions this often
_LOAD_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class TuneSpec:
    """What to tune and how: the model, where it is served, the budget and the load."""

    model_base_path: Path  # BASE/NAME: its newest version is the one tuned
    slo: tuple[str, ...]
    model_name: str | None = None  # default: the directory name of model_base_path
    address: str | None = None  # a running TF Serving watching model_base_path (else our own)
    clients: int = 16
    protocol: str = "grpc"
    budget_s: float = 300.0
    trial_s: float = 6.0  # measured time per candidate (3 windows), after 1 s of warm-up
    signature_name: str = "serving_default"
    allow_remote: bool = False
    tls: ClientTls | None = None  # how `address` is dialed (None: plaintext)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Candidate(_Model):
    """One setting of the four knobs. allowed_batch_sizes None: any size up to max_batch_size;
    num_batch_threads None: the running server's own (a thread pool the tuner cannot change)."""

    max_batch_size: int
    batch_timeout_micros: int
    num_batch_threads: int | None
    allowed_batch_sizes: list[int] | None = None

    def parameters(self, clients: int) -> BatchingParameters:
        """TF Serving's parameters for this candidate; the queue holds every client's request."""
        parameters = BatchingParameters(
            max_batch_size=self.max_batch_size,
            batch_timeout_micros=self.batch_timeout_micros,
            max_enqueued_batches=max(10, math.ceil(clients / self.max_batch_size) * 2),
            allowed_batch_sizes=tuple(self.allowed_batch_sizes or ()),
        )
        if self.num_batch_threads is None:  # the server's pool: TF Serving's default stands in
            return parameters
        return replace(parameters, num_batch_threads=self.num_batch_threads)

    def label(self) -> str:
        sizes = ",".join(map(str, self.allowed_batch_sizes)) if self.allowed_batch_sizes else "any"
        threads = self.num_batch_threads or "the server's"
        return (
            f"max_batch_size {self.max_batch_size}, batch_timeout_micros "
            f"{self.batch_timeout_micros}, num_batch_threads {threads}, allowed sizes {sizes}"
        )


class Trial(_Model):
    """One measured setting: batching off (candidate None) or a candidate."""

    index: int
    candidate: Candidate | None
    throughput_rps: float | None
    p50_ms: float | None
    p99_ms: float | None
    gate_value: float | None  # the first gate's value
    failures: int
    held: bool  # every gate passed and nothing failed
    why: str | None
    report: str  # its load test, relative to the output directory


class TuneResult(_Model):
    """tune.json: every trial, the winner, and why it won."""

    model_name: str
    slo: list[str]
    clients: int
    protocol: str
    server: str  # "graphserve (started by the tuner)" or the address of a running server
    trials: list[Trial]
    best: int | None  # index into trials
    reason: str
    parameters_file: str | None
    elapsed_s: float


def candidates_for(knob: str, current: Candidate, clients: int, cores: int) -> list[Candidate]:
    """The values one knob is tried at, the others kept: TF Serving's guide's ranges."""
    if knob == "max_batch_size":
        sizes = sorted({max(1, clients // 4), max(1, clients // 2), clients, 2 * clients})
        return [current.model_copy(update={"max_batch_size": s, "allowed_batch_sizes": None})
                for s in sizes]  # fmt: skip
    if knob == "batch_timeout_micros":
        return [current.model_copy(update={"batch_timeout_micros": t})
                for t in (0, 500, 1000, 2000, 5000, 10000)]  # fmt: skip
    if knob == "num_batch_threads":
        return [current.model_copy(update={"num_batch_threads": n})
                for n in sorted({1, cores, 2 * cores})]  # fmt: skip
    if knob == "allowed_batch_sizes":
        powers = [2**i for i in range(int(math.log2(current.max_batch_size)) + 1)]
        sizes = sorted({*powers, current.max_batch_size})
        return [current.model_copy(update={"allowed_batch_sizes": None}),
                current.model_copy(update={"allowed_batch_sizes": sizes})]  # fmt: skip
    raise ValueError(f"unknown knob {knob}")


def tune_batching(
    spec: TuneSpec, out_dir: Path, say: Callable[[dict[str, Any]], None] | None = None
) -> TuneResult:
    """Measure batching off and candidates within the budget; write OUT/tune.json, tune.md and
    OUT/batching_parameters.txt (the best that held the gates, else none); return the result.

    Raises SloError for gates the tuner cannot hold (none, a ratio, one naming an arm),
    LoadTestError when the model has no version or a candidate version is not served in time,
    ServerStartError when the tuner's own server does not start, ServerUnreachable when TLS is
    why `address` cannot be reached, and what `compare` raises.
    """
    from graphserve.loadtest.generator.reach import check_tls
    from graphserve.loadtest.results.slo import parse_gate

    started = time.monotonic()
    gates = [parse_gate(text) for text in spec.slo]
    if not gates or any(g.ratio or g.arm for g in gates):
        raise SloError(
            "tune batching needs latency or throughput gates of the one server it loads, such "
            f"as --slo 'p99<20ms'; got {', '.join(spec.slo) or 'none'}"
        )
    tell = say or (lambda _event: None)
    out_dir.mkdir(parents=True, exist_ok=True)
    name = model_name_of(
        CompareSpec(arms=(), model_name=spec.model_name, model_base_path=spec.model_base_path)
    )
    source = _newest_version(spec.model_base_path)
    if spec.address is not None:  # before a version is written: TLS that cannot work, said once
        check_tls("--address", "grpc", spec.address, spec.tls, name)
    session = _Session(spec, out_dir, name, tell, started)
    if spec.address is None:
        session.measure_off()
    cores = os.cpu_count() or 1
    recipe = Candidate(
        max_batch_size=spec.clients,
        batch_timeout_micros=0,
        num_batch_threads=None if spec.address else cores,
    )
    knobs = ["max_batch_size", "batch_timeout_micros", "allowed_batch_sizes"]
    if spec.address is None:
        knobs.insert(2, "num_batch_threads")
    with _versions(spec, out_dir, name, source, tell) as serve:
        session.serve = serve
        best = session.trial(recipe)
        while session.has_time():
            before = best
            for knob in knobs:
                around = best.candidate or recipe
                for candidate in candidates_for(knob, around, spec.clients, cores):
                    if not session.has_time():
                        break
                    trial = session.trial(candidate)
                    if _better(trial, best):
                        best = trial
            if before is best or not _gained(best, before):
                break
    result = session.result(best)
    _write(result, out_dir, spec)
    return result


class _Session:
    """The trials so far, the clock, and how each candidate is measured."""

    def __init__(
        self,
        spec: TuneSpec,
        out_dir: Path,
        model_name: str,
        say: Callable[[dict[str, Any]], None],
        started: float,
    ) -> None:
        self.spec, self.out_dir, self.model_name, self.say = spec, out_dir, model_name, say
        self.started = started
        self.trials: list[Trial] = []
        self.tried: dict[str, Trial] = {}
        self.serve: Callable[[Candidate], str] | None = None
        self.payload: Path | None = None

    def has_time(self) -> bool:
        """Whether one more trial fits in the budget (a trial's length from the ones so far)."""
        elapsed = time.monotonic() - self.started
        each = elapsed / len(self.trials) if self.trials else self.spec.trial_s + 10
        return elapsed + each <= self.spec.budget_s

    def measure_off(self) -> Trial:
        """Batching off: the model as it is, on a server of the tuner's without batching."""
        from graphserve.core.processes import ServerProcess

        self.say({"event": "trial_start", "index": 0, "label": "batching off"})
        args = ["graph", "--model-base-path", str(self.spec.model_base_path),
                "--model-name", self.model_name]  # fmt: skip
        server = ServerProcess.on_free_ports(args, self.model_name, self.out_dir / "off.log")
        try:
            server.start()
        except RuntimeError as exc:
            raise ServerStartError(f"the server without batching did not start: {exc}") from None
        try:
            return self._measure(None, server.grpc_address, str(server.rest_address))
        finally:
            server.stop()

    def trial(self, candidate: Candidate) -> Trial:
        key = candidate.model_dump_json()
        if key in self.tried:
            return self.tried[key]
        assert self.serve is not None
        self.say({"event": "trial_start", "index": len(self.trials), "label": candidate.label()})
        address = self.serve(candidate)
        trial = self._measure(candidate, address, address)
        self.tried[key] = trial
        return trial

    def _measure(self, candidate: Candidate | None, grpc: str, rest: str) -> Trial:
        index = len(self.trials)
        folder = f"trials/{index:02d}"
        address = grpc if self.spec.protocol == "grpc" else rest
        window = self.spec.trial_s / 3
        # The running server's own TLS; the tuner's servers serve plaintext.
        tls = self.spec.tls if address == self.spec.address else None
        report = compare(
            CompareSpec(
                arms=(Arm("batching" if candidate else "off", address, tls=tls),),
                protocol=self.spec.protocol,
                model_name=self.model_name,
                signature_name=self.spec.signature_name,
                payload_file=self.payload,
                model_base_path=None if self.payload else self.spec.model_base_path,
                load=LoadSpec(
                    loads=(float(self.spec.clients),),
                    warmup_s=1.0,
                    window_s=window,
                    min_windows=3,
                    max_windows=3,
                ),
                slo=self.spec.slo,
                allow_remote=self.spec.allow_remote,
            ),
            self.out_dir / folder,
        )
        if self.payload is None and (self.out_dir / folder / "payload.npz").is_file():
            self.payload = self.out_dir / folder / "payload.npz"  # the same bytes every trial
        trial = _trial(index, candidate, report, folder)
        self.trials.append(trial)
        self.say({"event": "trial", **trial.model_dump()})
        return trial

    def result(self, best: Trial) -> TuneResult:
        held = [t for t in self.trials if t.held and t.candidate is not None]
        winner = best if best.held else None
        return TuneResult(
            model_name=self.model_name,
            slo=list(self.spec.slo),
            clients=self.spec.clients,
            protocol=self.spec.protocol,
            server=self.spec.address or "graphserve serve graph (started by the tuner)",
            trials=self.trials,
            best=winner.index if winner else None,
            reason=_reason(winner, held, self.trials, self.spec),
            parameters_file="batching_parameters.txt" if winner else None,
            elapsed_s=round(time.monotonic() - self.started, 1),
        )


def _trial(index: int, candidate: Candidate | None, report: Report, folder: str) -> Trial:
    (step,) = report.steps
    (arm,) = step.arms.values()
    held, why = held_load(report)  # as a find-max probe holds: every gate, no failure
    return Trial(
        index=index,
        candidate=candidate,
        throughput_rps=arm.throughput_rps,
        p50_ms=arm.latency_ms.p50,
        p99_ms=arm.latency_ms.p99,
        gate_value=first_gate_value(report),
        failures=arm.failures,
        held=held,
        why=why,
        report=f"{folder}/report.html",
    )


def _better(trial: Trial, best: Trial) -> bool:
    """Holding the gates first; then throughput, a tie (within 2%) going to the lower p99."""
    if trial.held != best.held:
        return trial.held
    if not trial.held:
        return (trial.gate_value or math.inf) < (best.gate_value or math.inf)
    rps, best_rps = trial.throughput_rps or 0.0, best.throughput_rps or 0.0
    if abs(rps - best_rps) <= _TIE * max(rps, best_rps):
        return (trial.p99_ms or math.inf) < (best.p99_ms or math.inf)
    return rps > best_rps


def _gained(best: Trial, before: Trial) -> bool:
    rps, was = best.throughput_rps or 0.0, before.throughput_rps or 0.0
    return best.held != before.held or rps > (1 + _GAIN) * was


def _reason(winner: Trial | None, held: list[Trial], trials: list[Trial], spec: TuneSpec) -> str:
    """Why the winner won, in a sentence or two: what it gives, against batching off and the
    runner-up."""
    budget = " and ".join(spec.slo)
    if winner is None or winner.candidate is None:
        closest = min(trials, key=lambda t: t.gate_value or math.inf, default=None)
        near = f"; the closest, {_said(closest)}" if closest else ""
        return f"no candidate held {budget} at {spec.clients} clients{near}. Nothing written."
    text = f"{winner.candidate.label()}: {_said(winner)}, within {budget}"
    off = next((t for t in trials if t.candidate is None), None)
    if off is not None and off.throughput_rps and winner.throughput_rps:
        gain = winner.throughput_rps / off.throughput_rps
        text += f"; {gain:.2f}× the throughput of batching off ({_said(off)})"
        if off.held and gain < 1 - _TIE:
            text += (
                f". Batching off serves more at {spec.clients} clients: leave it off for this "
                "model, unless batching must be on (the file is then the best batching found)"
            )
    others = sorted((t for t in held if t is not winner), key=lambda t: -(t.throughput_rps or 0.0))
    if others:
        second = others[0]
        text += f". Next best: {second.candidate.label() if second.candidate else 'off'}, "
        text += _said(second)
    return text + "."


def _said(trial: Trial) -> str:
    rps = f"{trial.throughput_rps:,.0f} req/s" if trial.throughput_rps is not None else NONE
    p99 = f"p99 {trial.p99_ms:.3g} ms" if trial.p99_ms is not None else "no p99"
    return f"{rps} at {p99}"


def _newest_version(base: Path) -> Path:
    from graphserve.core.versions import version_dirs

    dirs = version_dirs(base)
    if not dirs:
        raise LoadTestError(f"{str(base)!r} holds no numbered version directory to tune")
    return dirs[max(dirs)]


@contextmanager
def _versions(
    spec: TuneSpec,
    out_dir: Path,
    name: str,
    source: Path,
    say: Callable[[dict[str, Any]], None],
) -> Iterator[Callable[[Candidate], str]]:
    """A function that serves a candidate and returns the address to load: it writes the
    candidate as a new version of the model (hard links and batching_params.pbtxt) and waits
    until the server serves it. With `spec.address` the versions go into the running server's
    model base path and are removed at the end; else into OUT/models, served by the tuner's
    own server, restarted when num_batch_threads changes."""
    from graphserve.core.processes import ServerProcess

    base = spec.model_base_path if spec.address else out_dir / "models" / name
    base.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    server: ServerProcess | None = None
    threads: int | None = None

    def serve(candidate: Candidate) -> str:
        nonlocal server, threads
        version = _write_version(base, source, candidate.parameters(spec.clients))
        written.append(version)
        if spec.address is not None:
            _wait_for(spec.address, name, int(version.name), tls=spec.tls)
            return spec.address
        if server is None or threads != candidate.num_batch_threads:
            if server is not None:
                server.stop()
            server = _tuner_server(base, name, candidate, out_dir, spec.clients)
            threads = candidate.num_batch_threads
        else:
            _wait_for(server.grpc_address, name, int(version.name))
        for old in written[:-1]:  # unloaded once the new one serves: its files can go
            shutil.rmtree(old, ignore_errors=True)
        say({"event": "serving", "version": int(version.name), "label": candidate.label()})
        return server.grpc_address if spec.protocol == "grpc" else str(server.rest_address)

    try:
        yield serve
    finally:
        if server is not None:
            server.stop()
        if spec.address is not None:
            for version in written:  # the running server goes back to the model's own newest
                shutil.rmtree(version, ignore_errors=True)


def _tuner_server(base: Path, name: str, candidate: Candidate, out_dir: Path, clients: int) -> Any:
    from graphserve.core.processes import ServerProcess

    pool = out_dir / "thread_pool.txt"  # only the thread pool counts beside per-model files
    pool.write_text(candidate.parameters(clients).to_text())
    args = [
        "graph", "--model-base-path", str(base), "--model-name", name,
        "--enable-batching", "--batching-parameters-file", str(pool),
        "--enable-per-model-batching-parameters",
        "--file-system-poll-wait-seconds", str(_POLL_S),
    ]  # fmt: skip
    server = ServerProcess.on_free_ports(args, name, out_dir / "tuner-server.log")
    try:
        server.start()
    except RuntimeError as exc:
        raise ServerStartError(f"the tuner's server did not start: {exc}") from None
    return server


def _write_version(base: Path, source: Path, parameters: BatchingParameters) -> Path:
    """A new version of the model under `base`, one above the highest there: `source`'s files
    hard-linked (copied across file systems) and the candidate's batching_params.pbtxt, renamed
    into place whole so a server never sees half a version."""
    from graphserve.core.versions import version_dirs

    number = max([*version_dirs(base), int(source.name)]) + 1
    staging = base / f".tuning-{number}"
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree(source, staging, copy_function=_link_or_copy)
    (staging / PER_MODEL_BATCHING_FILE).unlink(missing_ok=True)  # a link: never write through it
    (staging / PER_MODEL_BATCHING_FILE).write_text(parameters.to_text())
    final = base / str(number)
    staging.rename(final)
    return final


def _link_or_copy(source: str, destination: str) -> None:
    try:
        os.link(source, destination)
    except OSError:
        shutil.copy2(source, destination)


def _wait_for(address: str, name: str, version: int, *, tls: ClientTls | None = None) -> None:
    """Until `version` is AVAILABLE and no older version is (the traffic goes to it alone)."""
    from graphserve.core.client import model_status

    deadline = time.monotonic() + _LOAD_TIMEOUT_S
    last: list[Any] = []
    while time.monotonic() < deadline:
        try:
            last = model_status(address, name, tls=tls)
        except Exception:  # a server between versions may not answer: ask again
            last = []
        states = {v.version: v for v in last}
        failed = states.get(version)
        if failed is not None and failed.error_code and failed.state == "END":
            raise LoadTestError(
                f"version {version} (a batching candidate) failed to load on {address}: "
                f"{failed.error_message}"
            )
        serving = [v.version for v in last if v.state == "AVAILABLE"]
        if serving == [version]:
            return
        time.sleep(0.2)
    raise LoadTestError(
        f"version {version} of {name} was not the only one served by {address} within "
        f"{_LOAD_TIMEOUT_S:.0f} s (last status: {[(v.version, v.state) for v in last]}); does "
        f"the server watch {name}'s base path, with --enable_batching and "
        f"--enable_per_model_batching_parameters?"
    )


def _write(result: TuneResult, out_dir: Path, spec: TuneSpec) -> None:
    (out_dir / "tune.json").write_text(json.dumps(result.model_dump(mode="json"), indent=2) + "\n")
    (out_dir / "tune.md").write_text(render_markdown(result))
    parameters = out_dir / "batching_parameters.txt"
    parameters.unlink(missing_ok=True)
    if result.best is not None:
        best = result.trials[result.best].candidate
        assert best is not None
        parameters.write_text(best.parameters(spec.clients).to_text())


def render_markdown(result: TuneResult) -> str:
    """tune.md: the verdict, then every trial in the order it ran."""
    lines = [
        f"# Batching for {result.model_name}: {' and '.join(result.slo)} at {result.clients} "
        f"clients ({result.protocol})",
        "",
        f"**{result.reason}**",
        "",
        f"Server: {result.server}. {len(result.trials)} trials in {result.elapsed_s:.0f} s.",
        "",
        "| # | max_batch_size | timeout µs | threads | allowed sizes | req/s | p50 ms | p99 ms "
        "| result |",
        "|---:|---:|---:|---:|---|---:|---:|---:|---|",
    ]
    for t in result.trials:
        c = t.candidate
        cells = (
            [str(c.max_batch_size), str(c.batch_timeout_micros),
             str(c.num_batch_threads or "server's"),
             ",".join(map(str, c.allowed_batch_sizes)) if c.allowed_batch_sizes else "any"]
            if c else ["off", NONE, NONE, NONE]
        )  # fmt: skip
        verdict = "**best**" if t.index == result.best else ("held" if t.held else t.why or "")
        lines.append(
            f"| {t.index} | " + " | ".join(cells) + f" | {_num(t.throughput_rps, ',.0f')} | "
            f"{_num(t.p50_ms, '.3g')} | {_num(t.p99_ms, '.3g')} | {verdict} |"
        )
    if result.parameters_file:
        lines += ["", f"Written: `{result.parameters_file}`."]
    return "\n".join(lines) + "\n"


def _num(value: float | None, spec: str) -> str:
    return NONE if value is None else format(value, spec)
