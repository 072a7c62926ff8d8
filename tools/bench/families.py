"""The models users bring (issues 38, 51): eleven families, each a small module under docs_src/byom
that builds its model as its package does (or a file its script saves), exported, served and
load-tested through the documented commands, run as a reader runs them (from that directory,
`python -m graphserve ...`).

    FAMILIES            the table: name, source, title, the package that builds it, --input flags
    export_families     `graphserve export` per family: the version, its sizes, op count, inputs
    family_servers      one graph server for all (a model config), one eager server per family
    run_compare         a short `graphserve loadtest compare` of one family's two servers

tests/test_families.py (CI) and `python -m tools.bench families` (`make bench-families`, the
published tools/bench/results/families.{json,md}) both read the table and use these helpers.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from graphserve.core.execution import EAGER, not_eager
from graphserve.core.manifest import read_manifest
from graphserve.core.modelconfig import ModelConfig, model_config_text
from graphserve.core.processes import ServerProcess, model_available
from graphserve.loadtest.results.run import Report, load_report

__all__ = [
    "BENCH_COMPARE",
    "BYOM",
    "FAMILIES",
    "SHORT_COMPARE",
    "Exported",
    "Family",
    "FamilyServers",
    "bench_compare",
    "copy_sources",
    "export_families",
    "family_servers",
    "graphserve",
    "run_compare",
    "run_families",
    "write_families",
]

ROOT = Path(__file__).resolve().parents[2]
BYOM = ROOT / "docs_src" / "byom"

# `loadtest compare` timings, after the arguments: the shortest real run (tests/test_loadtest.py's
# _SHORT), and the benchmark's: `duration` measured per arm at one user, after 2 s of warm-up.
SHORT_COMPARE = ("--warmup", "0.5s", "--window", "0.5s", "--min-windows", "2", "--max-windows", "2")


def bench_compare(duration: str = "10s") -> tuple[str, ...]:
    return ("--warmup", "2s", "--duration", duration)


BENCH_COMPARE = bench_compare()

_SERVER_START_S = 600.0  # twelve servers importing TensorFlow at once on two cores
_COMMAND_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class Family:
    """A model family: its `source` in BYOM, the distribution `package` that builds it, the
    `inputs` (NAME:DTYPE:SHAPE) its export and eager server are told, when the source cannot
    declare its signature, the modules they `--import`, and the script (`prepare`) that writes
    a source that is a file, as the user's training script writes it."""

    name: str
    source: str
    title: str
    package: str
    inputs: tuple[str, ...] = ()
    imports: tuple[str, ...] = ()
    prepare: str = ""  # a script in BYOM run before the export (`python SCRIPT`)

    @property
    def source_flags(self) -> list[str]:
        """The flags that go with the source, for export and serve eager alike."""
        inputs = [flag for spec in self.inputs for flag in ("--input", spec)]
        return [*inputs, *(flag for module in self.imports for flag in ("--import", module))]

    def export_args(self, base_path: Path | None = None) -> list[str]:
        """`graphserve export` arguments as the module's docstring shows them, BASE if given."""
        base = [] if base_path is None else ["--base-path", str(base_path)]
        return ["export", self.source, "--name", self.name, *base, *self.source_flags]

    def eager_args(self) -> list[str]:
        """`graphserve serve eager` arguments (ports apart)."""
        return ["eager", self.source, "--model-name", self.name, *self.source_flags]

    def package_version(self) -> str:
        """`keras-hub 0.32.0`: the package as installed here, for the reports."""
        return f"{self.package} {metadata.version(self.package)}"


FAMILIES: tuple[Family, ...] = (
    Family("bert_keras_hub", "bert_keras_hub:build", "BERT text classifier (keras_hub)",
           "keras-hub"),
    Family("bert_transformers", "bert_transformers:build",
           "BERT sequence classifier (transformers, TensorFlow)", "transformers"),
    Family("custom_layers", "custom_layers.keras",
           "A .keras file with a custom registered layer (--import)", "keras",
           imports=("custom_layers",), prepare="custom_layers.py"),
    Family("distilbert_transformers", "distilbert_transformers:build",
           "DistilBERT sequence classifier (transformers, TensorFlow)", "transformers"),
    Family("efficientnet", "efficientnet:build", "EfficientNetB0 (keras.applications)", "keras"),
    Family("image_bytes", "image_bytes:build",
           "EfficientNetB0 on JPEG bytes, decoded inside (tf.io.decode_jpeg)", "tensorflow"),
    Family("keras_archive", "keras_archive",
           "A Keras model.export() archive: a SavedModel with no version directory", "keras",
           prepare="keras_archive.py"),
    Family("tabular", "tabular:build",
           "Keras model over a dict of mixed inputs, adapted preprocessing layers", "keras"),
    Family("text_classifier", "text_classifier:build",
           "Keras text classifier on raw strings (TextVectorization)", "keras"),
    Family("vit_transformers", "vit_transformers:build",
           "Vision Transformer image classifier (transformers, TensorFlow)", "transformers"),
    Family("vocab_module", "vocab_module:build", "tf.Module with a vocabulary file",
           "tensorflow", ("words:string:-1",)),
)  # fmt: skip


def graphserve(*args: str) -> list[str]:
    """The command line of `graphserve ARGS` with this interpreter."""
    return [sys.executable, "-m", "graphserve", *args]


def command_text(family: Family) -> str:
    """The export command as a reader types it in BYOM."""
    return " ".join(["graphserve", *family.export_args()])


def copy_sources(to: Path, families: Sequence[Family] = FAMILIES) -> Path:
    """BYOM's files copied to `to`, then each family's `prepare` script run there: the commands
    run in `to`, so Python's bytecode caches and the models never land in docs_src/.
    RuntimeError with the script's output when one fails."""
    shutil.copytree(BYOM, to, ignore=shutil.ignore_patterns("__pycache__"), dirs_exist_ok=True)
    for family in families:
        if not family.prepare:
            continue
        done = subprocess.run(
            [sys.executable, family.prepare], cwd=to, env=_env(), capture_output=True, text=True,
            timeout=_COMMAND_TIMEOUT_S, check=False,
        )  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(
                f"`python {family.prepare}` exited {done.returncode}:\n{_tail(done.stderr)}"
            )
    return to


def _env() -> dict[str, str]:
    return {**os.environ, "TF_CPP_MIN_LOG_LEVEL": os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2")}


def _tail(text: str, lines: int = 25) -> str:
    return "\n".join(text.splitlines()[-lines:])


# -- export ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Exported:
    """One family's export: where it went, how long the command took, what the manifest says."""

    family: Family
    version_dir: Path
    command_s: float  # the command from start to exit: Python, TensorFlow and the build included
    export_s: float  # graphserve's own (trace, write, verify, warm-up)
    manifest: dict[str, Any]

    @property
    def saved_model_bytes(self) -> int:
        return (self.version_dir / "saved_model.pb").stat().st_size

    @property
    def variables_bytes(self) -> int:
        return sum(p.stat().st_size for p in (self.version_dir / "variables").rglob("*"))

    @property
    def ops(self) -> int:
        return int(self.manifest["op_scan"]["total_ops"])

    @property
    def input_specs(self) -> dict[str, dict[str, Any]]:
        """serving_default's inputs: name -> {dtype, shape}."""
        return dict(self.manifest["signatures"]["serving_default"]["inputs"])

    def generated_inputs(self) -> list[dict[str, Any]]:
        """The inputs graphserve generated for the probe, parity and warm-up: per input its
        dtype, shape, range and why (the manifest's inputs.ranges), and how, in words."""
        from graphserve.core.inputs import InputSource
        from graphserve.core.signature import TensorSpec

        # Its ranges, read as the load test reads them (a samples file is not generated input).
        inputs = {**self.manifest.get("inputs", {}), "samples": None}
        source = InputSource.recorded({"inputs": inputs}, [])
        ranges = source.ranges
        rows = []
        for name, info in self.input_specs.items():
            shape = info["shape"]
            spec = TensorSpec(name, info["dtype"], None if shape is None else tuple(
                None if d < 0 else d for d in shape))  # fmt: skip
            value = ranges.get(name)
            rows.append({
                "name": name, "dtype": info["dtype"], "shape": shape,
                "range": None if value is None else [value.low, value.high],
                "why": None if value is None else value.why,
                "described": source.describe([spec]),
            })  # fmt: skip
        return rows


def export_family(family: Family, source_dir: Path, base_path: Path, log_dir: Path) -> Exported:
    """`graphserve export` of `family` from `source_dir` (`--output json`, its progress to
    log_dir/NAME-export.log); RuntimeError with the log's tail when it fails."""
    log_dir.mkdir(parents=True, exist_ok=True)
    log = log_dir / f"{family.name}-export.log"
    args = graphserve(*family.export_args(base_path), "--output", "json")
    started = time.perf_counter()
    with log.open("w") as progress:
        done = subprocess.run(
            args, cwd=source_dir, env=_env(), stdout=subprocess.PIPE, stderr=progress,
            text=True, timeout=_COMMAND_TIMEOUT_S, check=False,
        )  # fmt: skip
    command_s = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(
            f"`{command_text(family)}` exited {done.returncode}:\n{_tail(log.read_text())}"
        )
    result = json.loads(done.stdout)
    version_dir = Path(result["path"])
    manifest = read_manifest(version_dir)
    if manifest is None:
        raise RuntimeError(f"{version_dir} has no graphserve manifest")
    return Exported(family, version_dir, command_s, float(result["seconds"]), manifest)


def export_families(
    families: Sequence[Family], source_dir: Path, base_path: Path, log_dir: Path, jobs: int = 1
) -> dict[str, Exported]:
    """Every family exported, `jobs` at a time (1: each export has the machine to itself, as
    its time is reported)."""
    with ThreadPoolExecutor(jobs) as pool:
        done = pool.map(lambda f: export_family(f, source_dir, base_path, log_dir), families)
        return {e.family.name: e for e in done}


# -- servers -----------------------------------------------------------------------------------


class _ConfigServer(ServerProcess):
    """The graph server of a model config: ready once every model in it is AVAILABLE."""

    model_names: tuple[str, ...] = ()

    def is_ready(self) -> bool:
        return all(model_available(self.grpc_address, name) for name in self.model_names)


@dataclass(frozen=True)
class FamilyServers:
    graph: ServerProcess  # every family, from a model config
    eager: dict[str, ServerProcess]  # family name -> its eager server
    base_paths: dict[str, Path]  # family name -> its export's model base path

    def ready_s(self) -> dict[str, float | None]:
        return {"graph": self.graph.ready_s, **{f"eager {n}": s.ready_s for n, s in
                                                self.eager.items()}}  # fmt: skip


@contextlib.contextmanager
def family_servers(
    exports: Mapping[str, Exported], source_dir: Path, work_dir: Path
) -> Iterator[FamilyServers]:
    """`graphserve serve graph --model-config-file` for all the exports and `graphserve serve
    eager SOURCE` per family, started at once on free ports and waited for together; yields them
    ready and stops them. RuntimeError naming a server that did not start, with its log tail."""
    work_dir.mkdir(parents=True, exist_ok=True)
    config = work_dir / "models.config"
    config.write_text(
        model_config_text(ModelConfig(n, e.version_dir.parent) for n, e in exports.items())
    )
    names = tuple(exports)
    graph = _ConfigServer.on_free_ports(
        ["graph", "--model-config-file", str(config)], names[0], work_dir / "graph.log"
    )
    assert isinstance(graph, _ConfigServer)  # on_free_ports builds its own class
    graph.model_names = names
    eager = {
        name: ServerProcess.on_free_ports(
            e.family.eager_args(), name, work_dir / f"eager-{name}.log"
        )
        for name, e in exports.items()
    }
    servers = {"graph": graph, **{f"eager {n}": s for n, s in eager.items()}}
    try:
        # A child starts in the current directory: the eager servers import their factory from
        # there, as from a reader's shell in BYOM. Nothing else here reads the directory.
        with contextlib.chdir(source_dir), ThreadPoolExecutor(len(servers)) as pool:
            starting = {kind: pool.submit(s.start, _SERVER_START_S) for kind, s in servers.items()}
            for kind, future in starting.items():
                try:
                    future.result()
                except RuntimeError as exc:
                    raise RuntimeError(f"the {kind} server did not start: {exc}") from None
        yield FamilyServers(graph, eager, {n: e.version_dir.parent for n, e in exports.items()})
    finally:
        for server in servers.values():
            server.stop()


# -- load --------------------------------------------------------------------------------------


def compare_args(name: str, servers: FamilyServers, out: Path, timing: Sequence[str]) -> list[str]:
    """`graphserve loadtest compare` of family `name`'s graph and eager servers: gRPC, 1 user,
    its payload generated from what the export's manifest records (the ranges and image
    formats it read from the model), as a user's `--model-base-path` gives it."""
    return graphserve(
        "loadtest", "compare", "--graph", servers.graph.grpc_address,
        "--eager", servers.eager[name].grpc_address, "--model-name", name,
        "--model-base-path", str(servers.base_paths[name]),
        "--protocol", "grpc", "--users", "1", *timing, "--out", str(out),
    )  # fmt: skip


def run_compare(
    name: str, servers: FamilyServers, out: Path, timing: Sequence[str] = SHORT_COMPARE
) -> Report:
    """Run `compare_args` and read its report.json; RuntimeError with the command's output
    when it exits non-zero."""
    args = compare_args(name, servers, out, timing)
    done = subprocess.run(
        args, env=_env(), capture_output=True, text=True, timeout=_COMMAND_TIMEOUT_S, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(
            f"`{' '.join(args[2:])}` exited {done.returncode}:\n{_tail(done.stdout)}\n"
            f"{_tail(done.stderr)}"
        )
    return load_report(out / "report.json")


# -- the benchmark -----------------------------------------------------------------------------


def _load_row(report: Report) -> dict[str, Any]:
    (step,) = report.steps
    arms = step.arms
    ratio = step.ratios.get("graph/eager")
    ci95 = None if ratio is None else ratio.p50.ci95
    eager = report.arms.get("eager")
    return {
        # What the eager server said runs it (graphserve.core.execution): "eager" unless the
        # source's call is a graph (a tf.function), when the ratio is graph against graph.
        "eager_execution": (eager.model_extra or {}).get("execution") if eager else None,
        "p50_ms": {arm: arms[arm].latency_ms.p50 for arm in ("graph", "eager")},
        "p99_ms": {arm: arms[arm].latency_ms.p99 for arm in ("graph", "eager")},
        "requests": {arm: arms[arm].measured_requests for arm in ("graph", "eager")},
        "failures": sum(a.failures for a in arms.values()),
        "p50_ratio": None if ratio is None else ratio.p50.value,
        "p50_ratio_ci95": None if ci95 is None else list(ci95),
    }


def run_families(
    work_dir: Path,
    families: Sequence[Family] = FAMILIES,
    timing: Sequence[str] = BENCH_COMPARE,
    say: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Export every family one at a time, serve them all, load each one's two servers in turn:
    the results `write_families` writes."""
    from graphserve.loadtest.comparison.run import environment

    started = time.perf_counter()
    source_dir = copy_sources(work_dir / "byom")
    say(f"exporting {len(families)} families from {source_dir}")
    exports = export_families(families, source_dir, work_dir / "models", work_dir / "logs")
    say("starting one graph server and one eager server per family")
    rows = []
    with family_servers(exports, source_dir, work_dir / "servers") as servers:
        ready = servers.ready_s()
        for family in families:
            say(f"loadtest compare: {family.name}")
            report = run_compare(family.name, servers, work_dir / "load" / family.name, timing)
            e = exports[family.name]
            rows.append({
                "name": family.name, "title": family.title, "source": family.source,
                "package": family.package_version(), "command": command_text(family),
                "command_s": e.command_s, "export_s": e.export_s,
                "saved_model_bytes": e.saved_model_bytes, "variables_bytes": e.variables_bytes,
                "ops": e.ops, "inputs": e.generated_inputs(),
                "parity_max_abs_error": e.manifest["parity"]["max_abs_error"],
                "eager_ready_s": ready[f"eager {family.name}"], **_load_row(report),
            })  # fmt: skip
    return {
        "environment": environment().to_json(),
        "seconds": time.perf_counter() - started,
        "load": {"protocol": "grpc", "users": 1, "compare": list(timing)},
        "graph_ready_s": ready["graph"],
        "families": rows,
    }


def _ms(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}"


def _kb(size: int) -> str:
    return f"{size / 1024:,.0f} KB" if size < 1 << 20 else f"{size / (1 << 20):,.1f} MB"


def render_families(results: dict[str, Any]) -> str:
    env = results["environment"]
    rows = results["families"]
    lines = [
        "# The models users bring: export, serve and load",
        "",
        f"{env['timestamp']} on `{env['hostname']}`: {env['cpus']} CPUs, Python "
        f"{env['python']}, TensorFlow {env['versions'].get('tensorflow')}; the run took "
        f"{results['seconds']:.0f} s (`make bench-families`). Each of the {len(rows)} families "
        "is a module in docs_src/byom, exported by the command shown below, run in that "
        "directory (with `--output json`), one export at a time; all of them served by one "
        "graph server (a model config) and each by its own eager server; then `graphserve "
        "loadtest compare` over gRPC at 1 user, one family at a time "
        f"(`{' '.join(results['load']['compare'])}` per arm). Export s: graphserve's own "
        "(trace, write, verify, warm-up); command s: the whole command, Python, TensorFlow and "
        "the model's build included. Ratio: graph p50 / eager p50 (below 1: the graph is "
        "faster).",
        "",
        "| family | built by | export s (command s) | saved_model.pb | variables | ops "
        "| graph p50 ms | eager p50 ms | graph/eager p50 |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    graphs = [r for r in rows if r.get("eager_execution") not in (None, EAGER)]
    for r in rows:
        ratio = "—" if r["p50_ratio"] is None else f"{r['p50_ratio']:.3f}×"
        ratio += " †" if r in graphs else ""
        lines.append(
            f"| {r['name']} | {r['package']} | {r['export_s']:.1f} ({r['command_s']:.1f}) "
            f"| {_kb(r['saved_model_bytes'])} | {_kb(r['variables_bytes'])} | {r['ops']:,} "
            f"| {_ms(r['p50_ms']['graph'])} | {_ms(r['p50_ms']['eager'])} | {ratio} |"
        )
    for r in graphs:
        lines += ["", f"† {r['name']}: {not_eager(EAGER, r['eager_execution'])}."]
    lines += ["", "## Export commands and the inputs graphserve generated", ""]
    for r in rows:
        lines += [f"**{r['name']}**: {r['title']}", "", "```", r["command"], "```", ""]
        lines += [f"- {i['described']}" for i in r["inputs"]]
        lines.append("")
    return "\n".join(lines)


def write_families(results: dict[str, Any], out: Path) -> tuple[Path, Path]:
    """OUT/families.json and OUT/families.md."""
    from tools.bench.published import write

    json_path, md_path = write("families", results, out)
    return json_path, md_path
