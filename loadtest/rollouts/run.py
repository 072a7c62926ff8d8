"""A version swap under steady load: `graphserve loadtest rollout`.

    spec = RolloutSpec(address="127.0.0.1:8500", model_base_path=Path("models/mlp"),
                       new_version=Path("export/mlp/7"), rate=200, before_s=10, after_s=30)
    report = rollout(spec, Path("reports/rollout"))

Locust (loadtest/rollouts/locustfile.py, in a subprocess) sends the same pre-encoded Predict
steadily and records every request: when it was sent, its latency, its status and the version that
answered (the response's model_spec.version). This process is the controller: after `before_s`
it copies the new version into BASE/NAME the way a TF Serving file-system source needs it (under
a temporary name in BASE/NAME, renamed into place as the next version number: whole or not at
all), or with `push_existing` waits for a version someone else pushes, and asks GetModelStatus
every `poll_s` which versions the server holds. The load stops `after_s` after the swap ends (the
new version AVAILABLE, the old one unloaded), or when the swap does not happen in `timeout_s`.

Progress events go to the `progress` callback and to OUT/events.jsonl, one JSON object a line
("load_started", "waiting_for_push", "pushed", "swap_start", "new_available", "old_unloaded",
"swap_end", "stopping"): a deploy script run with `--push-existing` can wait for
"waiting_for_push" there.

Over TLS (a `grpcs://` address, or `tls`: the --tls-* options), the load, the metadata and the
status polls all dial with the same options; the locust process gets them in its environment. A
server that cannot be reached for TLS stops the rollout before any load, saying why.

With `traffic` (a traffic file: a request log, a warm-up file, `traffic make`'s), the load sends
the file's predict requests in recorded order, cycling, each encoded once; the first answer of
each version to each record is kept, and the report judges the new version's answers against the
old one's, request by request (loadtest/results/answers.py: the exporter's parity rule).

Only loopback targets are loaded (loadtest/generator/targets.py). TensorFlow (through the
payload and metadata modules) is imported when a rollout runs, not at import.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from graphserve.core.errors import (
    GraphserveError,
    LoadTestError,
    LocustRunError,
    RolloutError,
    ServerUnreachable,
    SloError,
)
from graphserve.core.tls import ClientTls
from graphserve.loadtest.generator.framed import (
    ANSWERS,
    REQUESTS,
    read_answers,
    write_requests,
)
from graphserve.loadtest.generator.locustrun import (
    log_tail,
    read_records,
    start_locust,
    stop_locust,
    wait_started,
)
from graphserve.loadtest.generator.targets import check_loopback, dial
from graphserve.loadtest.results.rollout import RolloutReport, RolloutSettings
from graphserve.loadtest.rollouts.analysis import Moments
from graphserve.loadtest.rollouts.spec import RolloutSpec
from graphserve.loadtest.rollouts.traffic import traffic_requests

__all__ = ["ROLLOUT_FILE", "RolloutSpec", "is_saved_model", "rollout", "serving_version"]

ROLLOUT_FILE = Path(__file__).with_name("locustfile.py")
_START_TIMEOUT_S = 90.0  # locust's start-up, on a busy machine
_UNLOAD_GRACE_S = 5.0  # after the new version is AVAILABLE, how long the old may take to go
_STOP_TIMEOUT_S = 20.0  # the users finish the call they are in, then the records are written
_STATUS_TIMEOUT_S = 5.0

Say = Callable[[dict[str, Any]], None]


def rollout(spec: RolloutSpec, out_dir: Path, progress: Say | None = None) -> RolloutReport:
    """Run the load, swap the version, write OUT/rollout.{json,md,html,png}; return the report.

    `progress` gets each event as it is written to OUT/events.jsonl. Raises RemoteTargetError
    (a target off loopback), SloError (a gate that cannot be read), LoadTestError (a spec that
    cannot work), ServerUnreachable (the server does not answer or has no AVAILABLE version of
    the model), RolloutError (the push failed), PayloadError, LocustRunError. A swap that did
    not complete in time is not raised: report.swap.completed is False and says why; missed
    gates are in report.slo.
    """
    from graphserve.loadtest.results.slo import parse_gate
    from graphserve.loadtest.rollouts.analysis import check_gate_windows

    _check(spec)
    gates = [parse_gate(text) for text in spec.slo]
    check_gate_windows(gates)
    if spec.traffic is None and any(g.metric.startswith("answers.") for g in gates):
        raise SloError("--slo answers.*: the answers are compared with --traffic FILE only")
    old = serving_version(spec.address, spec.name, tls=spec.tls)
    raw = out_dir / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    for stale in ("records.npz", "started.json", "stop", "request.bin", REQUESTS, ANSWERS):
        (raw / stale).unlink(missing_ok=True)
    (out_dir / "events.jsonl").unlink(missing_ok=True)
    say = _Events(out_dir / "events.jsonl", progress)
    say({"event": "payload", "old_version": old})
    _payload(spec, out_dir)
    process, log = _start_locust(spec, out_dir)
    try:
        moments = _Controller(spec, old, raw, process, say).run()
    finally:
        (raw / "stop").touch()
        stop_locust(process, _STOP_TIMEOUT_S)
    records = read_records(raw, log)
    from graphserve.loadtest.rollouts.report import build_report, write_rollout

    answers = read_answers(raw) if spec.traffic is not None else None
    report = build_report(
        spec, _settings(spec), records, moments, gates, _warmup_of(spec, moments), answers
    )
    write_rollout(report, out_dir)
    return report


def serving_version(address: str, model_name: str, *, tls: ClientTls | None = None) -> int:
    """The newest version of the model the server (over TLS with `tls`) has AVAILABLE.

    Raises ServerUnreachable when the server cannot be reached (for TLS: why, and what to
    give), does not know the model, or has no version of it AVAILABLE.
    """
    import grpc

    from graphserve.core.client import GrpcClient, status_request, version_statuses
    from graphserve.loadtest.generator.reach import grpc_tls_failure

    with GrpcClient.connect(address, timeout=_STATUS_TIMEOUT_S, tls=tls) as client:
        try:
            statuses = version_statuses(client.status(status_request(model_name)))
        except grpc.RpcError as exc:
            code = exc.code()
            if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                why = grpc_tls_failure(client, exc)  # TLS's reason says what to do
                hint = " (is the server running, and is that its gRPC port?)"
                said = why or f"{code.name}: {exc.details()}{hint}"
                raise ServerUnreachable(
                    f"cannot reach a TF Serving gRPC API at {address}: {said}"
                ) from None
            raise ServerUnreachable(
                f"GetModelStatus for model {model_name!r} at {address} failed: {code.name}: "
                f"{exc.details()}"
            ) from None
    available = [s.version for s in statuses if s.state == "AVAILABLE"]
    if not available:
        states = ", ".join(f"v{s.version} {s.state}" for s in statuses) or "no versions"
        raise ServerUnreachable(
            f"model {model_name!r} at {address} has no AVAILABLE version to roll from ({states})"
        )
    return max(available)


def is_saved_model(path: Path) -> bool:
    return any((path / name).is_file() for name in ("saved_model.pb", "saved_model.pbtxt"))


# ---------------------------------------------------------------------------------------------


def _check(spec: RolloutSpec) -> None:
    check_loopback(spec.address)
    if spec.rate is not None and spec.users is not None:
        raise LoadTestError("a rollout takes a rate (open loop) or users (closed loop), not both")
    if (spec.rate is not None and spec.rate <= 0) or (spec.users is not None and spec.users < 1):
        raise LoadTestError("the load must be a positive rate (req/s) or at least one user")
    if spec.before_s < 0 or spec.after_s < 0 or spec.timeout_s <= 0 or spec.poll_s <= 0:
        raise LoadTestError("before and after must be 0 s or more, timeout and poll above 0 s")
    if spec.max_in_flight < 1 or spec.first_requests < 1 or spec.steady_requests < 1:
        raise LoadTestError("max_in_flight, first_requests and steady_requests must be >= 1")
    if spec.push_existing and spec.new_version is not None:
        raise LoadTestError(
            "--push-existing waits for a version someone else pushes: drop --new-version"
        )
    if not spec.push_existing:
        if spec.new_version is None:
            raise LoadTestError("which version? pass --new-version DIR, or --push-existing")
        if not is_saved_model(spec.new_version):
            raise LoadTestError(
                f"--new-version {spec.new_version}: not a SavedModel directory (no saved_model.pb)"
            )
        if not spec.model_base_path.is_dir():
            raise LoadTestError(
                f"--model-base-path {spec.model_base_path} is not a directory: it must be the "
                "BASE/NAME the server watches"
            )


def _payload(spec: RolloutSpec, out_dir: Path) -> None:
    """A fixed-seed request built from the server's metadata, encoded once: OUT/payload.npz
    and OUT/raw/request.bin; with `spec.traffic`, the file's requests in OUT/raw/REQUESTS."""
    if spec.traffic is not None:
        write_requests(out_dir / "raw" / REQUESTS, traffic_requests(spec))
        return
    from graphserve.loadtest.generator.metadata import fetch_specs
    from graphserve.loadtest.generator.payloads import (
        build_payload,
        grpc_request_bytes,
        save_payload,
    )

    specs = fetch_specs("grpc", spec.address, spec.name, spec.signature_name, tls=spec.tls)
    inputs = build_payload(specs, spec.batch_size, spec.seed)
    save_payload(out_dir / "payload.npz", inputs)
    body = grpc_request_bytes(inputs, spec.name, spec.signature_name)
    (out_dir / "raw" / "request.bin").write_bytes(body)


def _start_locust(spec: RolloutSpec, out_dir: Path) -> tuple[subprocess.Popen[bytes], Path]:
    users = spec.users if spec.users is not None else spec.max_in_flight
    # Locust's own bound, beyond the controller's: the longest a run can take, and a margin.
    bound = spec.before_s + 2 * spec.timeout_s + _UNLOAD_GRACE_S + spec.after_s + 60
    log = out_dir / "locust.log"
    options = [
        "--rollout-dir", str((out_dir / "raw").resolve()),
        "--rollout-rate", str(spec.rate or 200.0) if spec.open_loop else "0",
    ]  # fmt: skip
    # The target's scheme says TLS to the locustfile, the environment with what.
    target, tls = dial("grpc", spec.address, spec.tls)
    return start_locust(ROLLOUT_FILE, target, users, bound, log, options, tls), log


def _settings(spec: RolloutSpec) -> RolloutSettings:
    return RolloutSettings(
        address=spec.address,
        model_name=spec.name,
        signature_name=spec.signature_name,
        model_base_path=str(spec.model_base_path),
        new_version_dir=str(spec.new_version) if spec.new_version else None,
        push_existing=spec.push_existing,
        mode="open" if spec.open_loop else "closed",
        load=float(spec.rate or 200.0) if spec.open_loop else float(spec.users or 1),
        max_in_flight=spec.max_in_flight if spec.open_loop else int(spec.users or 1),
        before_s=spec.before_s,
        after_s=spec.after_s,
        timeout_s=spec.timeout_s,
        poll_s=spec.poll_s,
        batch_size=spec.batch_size,
        seed=spec.seed,
        latency=(
            "from the scheduled send (open loop: a late send counts its lag)"
            if spec.open_loop
            else "from the send"
        ),
    )


def _warmup_of(spec: RolloutSpec, moments: Moments) -> tuple[bool | None, str | None]:
    """Whether the new version's directory holds warm-up records, and that file."""
    from graphserve.core.versions import version_dirs
    from graphserve.model.warmup import WARMUP_FILE

    where = spec.new_version
    if where is None and moments.new_version is not None:
        where = version_dirs(spec.model_base_path).get(moments.new_version)
    if where is None or not where.is_dir():
        return None, None
    return (where / WARMUP_FILE).is_file(), str(where / WARMUP_FILE)


class _Events:
    """Progress to the caller and to OUT/events.jsonl (flushed a line at a time)."""

    def __init__(self, path: Path, progress: Say | None) -> None:
        self._path, self._progress = path, progress

    def __call__(self, event: dict[str, Any]) -> None:
        line = json.dumps({**event, "time": time.time()})
        with self._path.open("a") as f:
            f.write(line + "\n")
        if self._progress is not None:
            self._progress(event)


class _Controller:
    """Waits for the load, pushes (or waits for a push), polls the versions, ends the load."""

    def __init__(
        self,
        spec: RolloutSpec,
        old: int,
        raw: Path,
        process: subprocess.Popen[bytes],
        say: Say,
    ) -> None:
        self.spec, self.raw, self.process, self.say = spec, raw, process, say
        self.log = raw.parent / "locust.log"
        self.moments = Moments(t0=0.0, old_version=old)
        self.last: dict[int, str] = {}
        self.answering = True  # the server answered the last GetModelStatus
        self.client: Any = None
        self.push_error: BaseException | None = None

    def run(self) -> Moments:
        m = self.moments
        m.t0 = wait_started(self.process, self.raw, self.log, _START_TIMEOUT_S)
        self.say({"event": "load_started", "old_version": m.old_version})
        spec = self.spec
        push_at = m.t0 + spec.before_s
        pusher: threading.Thread | None = None
        end_at: float | None = None
        waiting_said = False
        try:
            while True:
                now = time.time()
                self._poll(now)
                if self.process.poll() is not None:
                    raise LocustRunError(
                        f"locust exited with code {self.process.returncode} during the run: "
                        f"{log_tail(self.log)}"
                    )
                if self.push_error is not None:
                    raise RolloutError(f"pushing the new version failed: {self.push_error}")
                if now >= push_at and not spec.push_existing and pusher is None:
                    pusher = threading.Thread(target=self._push, daemon=True)
                    pusher.start()
                if now >= push_at and spec.push_existing and not waiting_said:
                    waiting_said = True
                    self.say({"event": "waiting_for_push", "old_version": m.old_version})
                if end_at is None:
                    end_at = self._swap_end(now, push_at)
                if end_at is not None and now >= end_at:
                    break
                time.sleep(max(0.0, spec.poll_s - (time.time() - now)))
        finally:
            if self.client is not None:
                self.client.close()
        if pusher is not None:
            pusher.join()
        m.load_end = time.time()
        self.say({"event": "stopping"})
        return m

    def _push(self) -> None:
        """Copy the new version in as BASE/NAME/<next>, whole or not at all (atomic rename)."""
        from graphserve.core.versions import atomic_version_dir, next_version

        m, spec = self.moments, self.spec
        assert spec.new_version is not None
        try:
            version = next_version(spec.model_base_path)
            m.push_started = time.time()
            with atomic_version_dir(spec.model_base_path, version) as tmp:
                shutil.copytree(spec.new_version, tmp)
            m.pushed = time.time()
            m.new_version, m.swap_start = version, m.pushed
            self.say({"event": "pushed", "version": version})
            self.say({"event": "swap_start", "version": version})
        except (OSError, GraphserveError) as exc:
            self.push_error = exc

    def _poll(self, now: float) -> None:
        """One GetModelStatus: note the versions' changes and the swap's moments."""
        import grpc

        from graphserve.core.client import GrpcClient, status_request, version_statuses

        m = self.moments
        if self.client is None:
            self.client = GrpcClient.connect(
                self.spec.address, timeout=max(self.spec.poll_s, 0.5), tls=self.spec.tls
            )
        try:
            response = self.client.status(status_request(self.spec.name))
            states = {s.version: s.state for s in version_statuses(response)}
        except grpc.RpcError as exc:
            if exc.code() == grpc.StatusCode.NOT_FOUND:
                states = {}  # the server holds no version of the model
            else:
                self._no_answer(now)
                return
        if not self.answering:
            self.answering = True
            m.changes.append((now, None, "ANSWERS"))
        for version, state in states.items():
            if self.last.get(version) != state:
                m.changes.append((now, version, state))
        for version in self.last.keys() - states.keys():
            m.changes.append((now, version, "GONE"))
        self.last = states
        old_state = states.get(m.old_version)
        if old_state != "AVAILABLE" and m.old_left_available is None:
            m.old_left_available = now
        if self.spec.push_existing and m.swap_start is None:
            newer = [v for v in states if v > m.old_version]
            if newer or old_state != "AVAILABLE":
                m.swap_start = now
                self.say({"event": "swap_start", "version": max(newer) if newer else None})
        if self.spec.push_existing and m.swap_start is not None:
            newer = [v for v in states if v > m.old_version]
            if newer and (m.new_version is None or max(newer) > m.new_version):
                m.new_version = max(newer)
        if m.swap_start is None:
            return  # before the swap, changes are noted but mean nothing for it
        if m.old_unloaded is None and old_state in (None, "END"):
            m.old_unloaded = now
            self.say({"event": "old_unloaded", "version": m.old_version})
        new_state = states.get(m.new_version) if m.new_version is not None else None
        if new_state is not None and m.new_listed is None:
            m.new_listed = now
        if new_state == "AVAILABLE" and m.new_available is None:
            m.new_available = now
            self.say({"event": "new_available", "version": m.new_version})

    def _no_answer(self, now: float) -> None:
        """The server did not answer: a new channel next time (a failed one backs off for
        seconds before it connects again), and with push_existing the swap has begun."""
        m = self.moments
        self.client.close()
        self.client = None
        if not self.answering:
            return
        self.answering = False
        m.changes.append((now, None, "NO ANSWER"))
        if m.old_left_available is None:
            m.old_left_available = now
        if self.spec.push_existing and m.swap_start is None:
            m.swap_start = now
            self.say({"event": "swap_start", "version": None})

    def _swap_end(self, now: float, push_at: float) -> float | None:
        """When the load ends, once that is known: after_s past the swap's end, or now when
        the swap did not happen in time (with the reason in moments.note)."""
        m, spec = self.moments, self.spec
        if m.swap_start is None:
            if spec.push_existing and now > push_at + spec.timeout_s:
                m.note = (
                    f"no new version of {spec.name} appeared within {spec.timeout_s:g} s of "
                    "waiting (--push-existing: push one into the base path the server watches)"
                )
                return now
            return None
        if m.new_available is None:
            if now > m.swap_start + spec.timeout_s:
                version = f"version {m.new_version}" if m.new_version else "no new version"
                m.note = (
                    f"{version} did not become AVAILABLE within {spec.timeout_s:g} s; does the "
                    f"server watch {spec.model_base_path} (a file-system source)?"
                )
                return now
            return None
        if m.old_unloaded is not None:
            m.swap_end = max(m.new_available, m.old_unloaded)
        elif now > m.new_available + _UNLOAD_GRACE_S:
            m.swap_end = m.new_available
            m.note = (
                f"version {m.old_version} was still loaded {_UNLOAD_GRACE_S:g} s after version "
                f"{m.new_version} became AVAILABLE (a version policy that serves both?)"
            )
        else:
            return None
        self.say({"event": "swap_end", "version": m.new_version})
        return m.swap_end + spec.after_s
