"""The A/B comparison: the same locust load, the same payload, against each arm in turn.

    compare({"graph": "127.0.0.1:8500", "eager": "127.0.0.1:9500"}, out_dir=Path("out"))

For every arm, locust runs headless in a subprocess on `loadtest/locustfile.py` (a fresh process per
arm, so no arm inherits another's connections or warm caches), bounded in time by `-t` and by a hard
timeout. The payload is built once, from the first arm's model metadata with a fixed seed, and
written to `OUT/payload.npz`; every arm sends exactly those inputs.

TensorFlow (through the metadata and payload modules) is imported inside `compare`, not at import.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from importlib import metadata as importlib_metadata
from pathlib import Path

from loadtest.errors import LoadTestError, LocustRunError
from loadtest.report import ArmResult, ComparisonReport, RunSettings, write_report
from loadtest.targets import check_loopback, http_base_url

__all__ = ["LOCUSTFILE", "PROTOCOLS", "compare", "locust_command"]

LOCUSTFILE = Path(__file__).with_name("locustfile.py")
PROTOCOLS: dict[str, str] = {"grpc": "GrpcPredictUser", "rest": "RestPredictUser"}

# Users get this long to finish the call they are in when the run time is up.
_STOP_TIMEOUT_S = 5
# Beyond run time and stop timeout: a locust process imports TensorFlow (seconds on a small box)
# and fetches nothing else; a process still alive after this is stuck and gets killed.
_STARTUP_MARGIN_S = 90
_VERSIONED = ("graphserve", "tensorflow", "tensorflow-serving-api", "grpcio", "locust")


def compare(
    arms: Mapping[str, str],
    out_dir: Path,
    *,
    protocol: str = "grpc",
    users: int = 1,
    duration_s: int = 20,
    model_name: str = "mlp",
    signature_name: str = "serving_default",
    batch_size: int = 1,
    max_requests: int | None = None,
    seed: int = 0,
    allow_remote: bool = False,
    progress: Callable[[str], None] | None = None,
) -> ComparisonReport:
    """Load-test every arm (name -> `HOST:PORT`) in order; write and return the report.

    The last arm is the baseline of the ratios (pass graph, then eager). Raises RemoteTargetError
    for a non-loopback address without `allow_remote`, PayloadError when the first arm's metadata
    gives no usable payload, LocustRunError when a locust run times out or leaves no statistics.
    An arm that ran but got no successful requests is reported, not raised.
    """
    _check_settings(arms, protocol, users, duration_s, batch_size, max_requests)
    hosts = {name: _locust_host(address, protocol, allow_remote) for name, address in arms.items()}
    say = progress or (lambda _message: None)
    out_dir.mkdir(parents=True, exist_ok=True)

    # Late: these import TensorFlow's protobuf modules.
    from loadtest.metadata import fetch_specs
    from loadtest.payloads import build_payload, save_payload

    first_name, first_address = next(iter(arms.items()))
    say(f"reading the signature of {model_name!r} from {first_name} ({first_address})")
    specs = fetch_specs(protocol, hosts[first_name], model_name, signature_name)
    payload_file = out_dir / "payload.npz"
    save_payload(payload_file, build_payload(specs, batch_size, seed))

    settings = RunSettings(
        protocol=protocol,
        users=users,
        duration_s=duration_s,
        model_name=model_name,
        signature_name=signature_name,
        batch_size=batch_size,
        max_requests=max_requests,
        seed=seed,
        payload_file=str(payload_file),
        timestamp=datetime.now(UTC).isoformat(timespec="seconds"),
        versions=_versions(),
    )
    results: list[ArmResult] = []
    for name, address in arms.items():
        say(f"{name}: {users} user(s), {duration_s} s of {protocol} Predict on {address}")
        results.append(_run_arm(name, address, hosts[name], settings, out_dir, allow_remote))
    report = ComparisonReport(arms=results, settings=settings)
    write_report(report, out_dir)
    return report


def locust_command(
    host: str, settings: RunSettings, stats_prefix: Path, allow_remote: bool = False
) -> list[str]:
    """The headless locust command line for one arm; its stats go to `stats_prefix`*."""
    command = [
        sys.executable, "-m", "locust",
        "-f", str(LOCUSTFILE),
        "--headless",
        "-u", str(settings.users),
        "-r", str(settings.users),  # all users start within the first second
        "-t", f"{settings.duration_s}s",
        "--host", host,
        "--csv", str(stats_prefix),
        "--json-file", str(stats_prefix),
        "--only-summary",
        "--stop-timeout", str(_STOP_TIMEOUT_S),
        "--loglevel", "WARNING",
        "--model-name", settings.model_name,
        "--signature-name", settings.signature_name,
        "--payload-file", settings.payload_file,
        "--seed", str(settings.seed),
    ]  # fmt: skip
    if settings.max_requests:
        command += ["--max-requests", str(settings.max_requests)]
    if allow_remote:
        command.append("--allow-remote")
    return [*command, PROTOCOLS[settings.protocol]]


def _run_arm(
    name: str, address: str, host: str, settings: RunSettings, out_dir: Path, allow_remote: bool
) -> ArmResult:
    from loadtest.stats import arm_result, read_locust_json

    stats_prefix = out_dir / name
    command = locust_command(host, settings, stats_prefix, allow_remote)
    # Quiet TensorFlow's C++ start-up logs in the locust process; they say nothing about the run.
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    timeout_s = settings.duration_s + _STOP_TIMEOUT_S + _STARTUP_MARGIN_S
    log_path = out_dir / f"{name}_locust.log"
    try:
        done = subprocess.run(
            command, env=env, capture_output=True, text=True, timeout=timeout_s, check=False
        )
    except subprocess.TimeoutExpired as exc:
        log_path.write_text(_text(exc.stdout) + _text(exc.stderr))
        raise LocustRunError(
            f"locust on arm {name!r} ({address}) did not end within {timeout_s} s and was "
            f"killed; its output is in {log_path}"
        ) from None
    log_path.write_text(done.stdout + done.stderr)
    json_path = Path(f"{stats_prefix}.json")  # locust appends ".json" to --json-file
    if not json_path.exists():
        raise LocustRunError(
            f"locust on arm {name!r} ({address}) exited with code {done.returncode} and wrote no "
            f"statistics: {_last_lines(done.stderr)}"
        )
    return arm_result(name, address, read_locust_json(json_path))


def _check_settings(
    arms: Mapping[str, str],
    protocol: str,
    users: int,
    duration_s: int,
    batch_size: int,
    max_requests: int | None,
) -> None:
    if not arms:
        raise LoadTestError("no arms to compare: pass at least one name -> address")
    if protocol not in PROTOCOLS:
        raise LoadTestError(f"protocol {protocol!r}: expected one of {', '.join(PROTOCOLS)}")
    for label, value in (("users", users), ("duration", duration_s), ("batch size", batch_size)):
        if value < 1:
            raise LoadTestError(f"{label} must be at least 1, got {value}")
    if max_requests is not None and max_requests < 1:
        raise LoadTestError(f"max requests must be at least 1, got {max_requests}")
    for name in arms:
        # The name becomes a file name in the output directory.
        if not name or not name.replace("-", "").replace("_", "").isalnum():
            raise LoadTestError(f"arm name {name!r}: use letters, digits, '-' and '_' only")


def _locust_host(address: str, protocol: str, allow_remote: bool) -> str:
    check_loopback(address, allow_remote)
    return http_base_url(address) if protocol == "rest" else address


def _versions() -> dict[str, str]:
    versions = {"python": sys.version.split()[0]}
    for dist in _VERSIONED:
        try:
            versions[dist] = importlib_metadata.version(dist)
        except importlib_metadata.PackageNotFoundError:
            versions[dist] = "not installed"
    return versions


def _last_lines(text: str, count: int = 5) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return " | ".join(lines[-count:]) or "(no output)"


def _text(value: str | bytes | None) -> str:
    if value is None:
        return ""
    return value.decode(errors="replace") if isinstance(value, bytes) else value
