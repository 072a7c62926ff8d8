"""Self-managed comparisons: start the servers, load them, stop them.

    graphserve loadtest compare --model-base-path models/mlp --source examples:mlp

starts the embedded graph server on the SavedModel and the eager server on the source (and any
other runner asked for with --serve: eager-predict, eager-function; --calibrate adds the null
endpoint), each a child process on free loopback ports with metrics on, waits until each reports
its model AVAILABLE, runs the sweep against them, and stops them (SIGTERM, drain) whatever happens.

The eager servers get what the export was given, as its manifest (the newest version's
`assets.extra/graphserve.json`) records it: `--input`, `--output-names`, `--signature-file`,
`--samples-file`, `--input-range`; and the source itself when none is given.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from graphserve.core.defaults import DEFAULT_METRICS_PATH as METRICS_PATH
from graphserve.core.errors import LoadTestError, ServerStartError
from graphserve.core.manifest import MANIFEST_FILE, read_manifest
from graphserve.core.processes import SERVER_KINDS, export_flags, serve_args
from graphserve.core.signature import SERVING_DEFAULT
from graphserve.core.versions import served_versions
from graphserve.loadtest.comparison.run import Arm, CompareSpec, compare, model_name_of
from graphserve.loadtest.report.analysis import CALIBRATION_ARM
from graphserve.loadtest.results.run import ColdStartRun, Report

__all__ = [
    "SERVER_KINDS",
    "ExportRecord",
    "Run",
    "export_record",
    "managed_servers",
    "run_managed",
]

# What runs against the servers once they are up: `compare`, or a find-max search.
Run = Callable[[CompareSpec, Path, Callable[[dict[str, Any]], None] | None], Report]

assert CALIBRATION_ARM in SERVER_KINDS  # the null server is the calibration arm

# Sources that are paths: gone with the file, unlike a module or an example.
_PATH_SOURCES = {"savedmodel": "SavedModel directory", "keras": "Keras file"}


@dataclass(frozen=True)
class ExportRecord:
    """What a graphserve export was given, from the manifest of the newest version under a
    model base path: the source (`source.text`, `source.kind`) and the export's `options`."""

    manifest: Path
    source: str | None = None
    source_kind: str | None = None
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def source_gone(self) -> str | None:
        """What the source was, when it was a path that no longer exists (else None)."""
        what = _PATH_SOURCES.get(self.source_kind or "")
        if self.source is None or what is None or Path(self.source).exists():
            return None
        return f"{what} {self.source}"


def export_record(model_base_path: Path) -> ExportRecord | None:
    """The record of the newest numeric version under `model_base_path`; None when there is no
    version or it has no manifest (not exported by graphserve). LoadTestError when the manifest
    cannot be read."""
    dirs = served_versions(Path(model_base_path))
    if not dirs:
        return None
    version_dir = dirs[max(dirs)]
    try:
        manifest = read_manifest(version_dir)
    except (OSError, ValueError) as exc:
        raise LoadTestError(f"cannot read {version_dir / MANIFEST_FILE}: {exc}") from None
    if manifest is None:
        return None
    source = manifest.get("source")
    source = source if isinstance(source, dict) else {}
    options = manifest.get("options")
    return ExportRecord(
        manifest=version_dir / MANIFEST_FILE,
        source=str(source["text"]) if source.get("text") else None,
        source_kind=str(source["kind"]) if source.get("kind") else None,
        options=options if isinstance(options, dict) else {},
    )


def _runs_source(kind: str) -> bool:
    return kind in SERVER_KINDS and "{source}" in SERVER_KINDS[kind]


def _eager_setup(
    kinds: Sequence[str],
    model_base_path: Path,
    source: str | None,
    say: Callable[[str], None],
) -> tuple[str | None, list[str]]:
    """The source and flags for the servers in `kinds` that run the source: `source`, else the
    one the export's manifest records; the flags the export was given. LoadTestError when they
    need a source and there is none to use."""
    if not any(_runs_source(kind) for kind in kinds):
        return source, []
    record = export_record(model_base_path)
    if source is None:
        gone = record.source_gone if record is not None else None
        if record is None or record.source is None or gone:
            why = f": the export's source, the {gone}, no longer exists" if gone else ""
            raise LoadTestError(
                f"the eager servers need --source (the model's Python source){why}; or pass "
                "--serve graph for the graph server alone"
            )
        source = record.source
        say(f"no --source: the eager servers run {source}, the export's source ({record.manifest})")
    if record is None:
        return source, []
    flags, missing = export_flags(record.options)
    for path in missing:
        say(f"{path}, which the export was given, no longer exists: the eager servers go without")
    if flags:
        say(f"the eager servers get what the export was given: {' '.join(flags)}")
    return source, flags


@contextmanager
def managed_servers(
    kinds: Sequence[str],
    *,
    model_base_path: Path,
    source: str | None,
    model_name: str,
    protocol: str,
    log_dir: Path,
    source_flags: Sequence[str] = (),
    say: Callable[[str], None] = lambda _message: None,
) -> Iterator[list[Arm]]:
    """Start one server per kind; yield their arms (address for `protocol`, metrics URL). The
    kinds that run `source` get `source_flags` too (export_flags of the export's manifest)."""
    from graphserve.core.processes import ServerProcess

    unknown = [k for k in kinds if k not in SERVER_KINDS]
    if unknown:
        raise LoadTestError(
            f"unknown server kind {', '.join(unknown)}: expected {', '.join(SERVER_KINDS)}"
        )
    if source is None and any(_runs_source(k) for k in kinds):
        raise LoadTestError("the eager servers need --source (the model's Python source)")
    started: list[ServerProcess] = []
    arms: list[Arm] = []
    try:
        for kind in kinds:
            args = serve_args(kind, model_base_path, source, source_flags)
            args += ["--model-name", model_name, "--metrics"]
            process = ServerProcess.on_free_ports(
                args, model_name, log_path=log_dir / f"{kind}-server.log"
            )
            say(f"starting the {kind} server")
            try:
                process.start()
            except RuntimeError as exc:
                asks = _runs_source(kind) and _ASKS_FOR_A_FLAG in str(exc)
                hint = _eager_hint(kind, model_base_path) if asks else ""
                raise ServerStartError(f"the {kind} server did not start: {exc}{hint}") from None
            started.append(process)
            rest = str(process.rest_address)
            arms.append(
                Arm(
                    name=kind,
                    address=process.grpc_address if protocol == "grpc" else rest,
                    metrics_url=f"http://{rest}{METRICS_PATH}",
                    details={
                        "runner": kind,
                        "managed": True,
                        "grpc": process.grpc_address,
                        "rest": rest,
                        "server_command": ["graphserve", *process.args[3:]],
                    },
                )
            )
            say(f"{kind} server ready: gRPC {process.grpc_address}, REST {rest}")
        yield arms
    finally:
        for process in started:
            process.stop()


# How the eager server's messages ask for a flag of its own ("pass --input NAME:DTYPE:SHAPE").
_ASKS_FOR_A_FLAG = "pass --"


def _eager_hint(kind: str, model_base_path: Path) -> str:
    """What to do when the eager server asks for `graphserve serve eager` flags (--input,
    --allow-unsafe, ...) that `loadtest compare` does not have."""
    return (
        f"\n`loadtest compare` gives the {kind} server the --input, --output-names, "
        "--signature-file, --samples-file, --input-range and --import its export was given, as "
        f"the newest version's manifest under {model_base_path} records them, and no others: "
        "export the "
        "model with the flags it needs (`graphserve export SOURCE --input ...`), or start the "
        "eager server yourself (`graphserve serve eager SOURCE ...`) and pass --serve graph "
        "--eager HOST:PORT"
    )


def run_managed(
    spec: CompareSpec,
    out_dir: Path,
    *,
    kinds: Sequence[str],
    source: str | None,
    extra_arms: Sequence[Arm] = (),
    cold_start: bool = False,
    say: Callable[[str], None] = lambda _message: None,
    progress: Callable[[dict[str, Any]], None] | None = None,
    run: Run = compare,
) -> Report:
    """Start `kinds` on spec.model_base_path, add `extra_arms` (e.g. a TF Serving address),
    optionally measure cold starts first, `run` the comparison (or a find-max search: any
    function of the spec, the output directory and the progress callback), stop the servers.

    The kinds that run the source get the flags its export was given (ExportRecord), and the
    source the export recorded when `source` is None. LoadTestError when they need a source
    and there is none (none given, none recorded, or a recorded path that no longer exists)."""
    base = spec.model_base_path
    if base is None:
        raise LoadTestError("a self-managed comparison needs --model-base-path BASE/NAME")
    # The servers serve the model under the name the load test asks for.
    spec = replace(spec, model_name=model_name_of(spec))
    source, flags = _eager_setup(kinds, base, source, say)
    cold: list[ColdStartRun] | None = None
    if cold_start:
        cold = _cold_start(spec, out_dir, source, flags, say)
    with managed_servers(
        kinds,
        model_base_path=base,
        source=source,
        model_name=model_name_of(spec),
        protocol=spec.protocol,
        log_dir=out_dir,
        source_flags=flags,
        say=say,
    ) as arms:
        ordered = _order([*arms, *extra_arms])
        return run(replace(spec, arms=ordered, cold_start=cold), out_dir, progress)


def _order(arms: Sequence[Arm]) -> tuple[Arm, ...]:
    """Candidates first, eager baselines last (the very last is the default baseline), null
    endpoint in between: `graph, tfserving, null, eager-predict, eager`."""

    def rank(arm: Arm) -> int:
        if arm.name == "eager":
            return 3
        if arm.name.startswith("eager"):
            return 2
        return 1 if arm.name == CALIBRATION_ARM else 0

    return tuple(sorted(arms, key=rank))


def _cold_start(
    spec: CompareSpec,
    out_dir: Path,
    source: str | None,
    source_flags: Sequence[str],
    say: Callable[[str], None],
) -> list[ColdStartRun]:
    from graphserve.loadtest.comparison.coldstart import cold_start_suite
    from graphserve.loadtest.comparison.run import payload_specs
    from graphserve.loadtest.generator.payloads import build_payload

    assert spec.model_base_path is not None
    specs, _, recorded = payload_specs(spec)
    signature = spec.signature_name or SERVING_DEFAULT
    payload = build_payload(specs, spec.batch_size, spec.seed, recorded, signature)
    say("measuring cold starts (time to ready, first request against steady p50)")
    try:
        return cold_start_suite(
            spec.model_base_path,
            source,
            model_name_of(spec),
            payload,
            work_dir=out_dir / "cold-start",
            log=say,
            source_flags=source_flags,
        )
    except ServerStartError as exc:
        if "serve eager" not in exc.message or _ASKS_FOR_A_FLAG not in exc.message:
            raise
        hint = _eager_hint("eager", spec.model_base_path)
        raise ServerStartError(f"{exc.message}{hint}") from None
