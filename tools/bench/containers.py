"""What containers cost here: `python -m tools.bench containers [--out tools/bench/results]
[--skip-cold]`.

- Image builds: the base from Debian's packages (debootstrap + docker import), the wheels (pip
  download; cold still has pip's own cache), and the graph and TF Serving stand-in targets, cold
  (the base's tag removed, the wheels deleted, the targets built with --no-cache) and cached
  (built again with nothing changed);
- `graphserve deploy tfserving --network host` with the stand-in: from the command to every
  model AVAILABLE, and `deploy down`;
- the same mlp load (gRPC Predict, 1 and 16 users) against the graph server started on the host
  and the same server in its container on the host's network, interleaved in one
  `loadtest compare` run, so the container's cost is a ratio measured under the same conditions.

Writes OUT/containers.json and OUT/containers.md. Needs a Docker engine (make docker-engine) and
root for the cold base. A development tool, like the rest of tools/bench/.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
BASE = "graphserve-base:bookworm-python3.11"
GRAPH = "graphserve-graph:local"
STANDIN = "graphserve-tfserving-standin:local"
GRAPHSERVE = str(Path(sys.executable).parent / "graphserve")


def _timed(command: list[str], **kwargs: Any) -> float:
    started = time.monotonic()
    subprocess.run(command, check=True, cwd=ROOT, **kwargs)
    return time.monotonic() - started


def _build(target: str, tag: str, *, cold: bool) -> float:
    command = ["docker", "build", "--quiet", "-f", "docker/Dockerfile", "--target", target,
               "--build-arg", f"PYTHON_IMAGE={BASE}", "-t", tag, "."]  # fmt: skip
    if cold:
        command.insert(2, "--no-cache")
    return _timed(command, stdout=subprocess.DEVNULL)


def image_builds(skip_cold: bool) -> dict[str, dict[str, float | None]]:
    env = {**os.environ, "PYTHON": sys.executable}
    wheels = ROOT / "docker" / "wheels"
    builds: dict[str, dict[str, float | None]] = {}
    cold: dict[str, float | None] = {"base": None, "wheels": None}
    if not skip_cold:
        subprocess.run(["docker", "image", "rm", BASE], capture_output=True, check=False)
        cold["base"] = _timed(["docker/build-images", "--only", "base"], env=env)
        for stale in [*wheels.glob("*.whl"), *wheels.glob(".fetched-*")]:
            stale.unlink()
        cold["wheels"] = _timed(["docker/build-images", "--only", "wheels"], env=env)
    for step in ("base", "wheels"):
        cached = _timed(["docker/build-images", "--only", step], env=env)
        builds[step] = {"cold_s": cold[step], "cached_s": cached}
    for target, tag in (("graph", GRAPH), ("tfserving-standin", STANDIN)):
        cold_s = None if skip_cold else _build(target, tag, cold=True)
        builds[target] = {"cold_s": cold_s, "cached_s": _build(target, tag, cold=False)}
    return builds


def deploy_times(base: Path, work: Path) -> dict[str, float]:
    from graphserve.core.processes import free_ports

    project, name = work / "deploy", f"gs-bench-{os.getpid()}"
    grpc_port, rest_port = free_ports(2)
    command = [GRAPHSERVE, "deploy", "tfserving", "--model-base-path", str(base), "--image",
               STANDIN, "--gpus", "0", "--network", "host", "--grpc-port", str(grpc_port),
               "--rest-port", str(rest_port), "--name", name, "--project-dir", str(project),
               "--output", "json"]  # fmt: skip
    up = _timed(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    down = _timed([GRAPHSERVE, "deploy", "down", "--project-dir", str(project)],
                  stderr=subprocess.DEVNULL)  # fmt: skip
    return {"deploy_to_available_s": up, "down_s": down}


def host_vs_container(base: Path, work: Path, duration: str) -> dict[str, Any]:
    """The graph server on the host and in its container (host network), one comparison."""
    from graphserve.core.processes import free_ports
    from graphserve.deploy.wait import wait_until_available

    # Two servers on the host's network in one run: four ports, none picked twice.
    host_port, host_rest, container_port, container_rest = free_ports(4)
    name = f"gs-bench-graph-{os.getpid()}"
    server = subprocess.Popen(
        [GRAPHSERVE, "serve", "graph", "--model-base-path", str(base / "mlp"), "--model-name",
         "mlp", "--grpc-port", str(host_port), "--rest-port", str(host_rest)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    subprocess.run(
        ["docker", "run", "--detach", "--name", name, "--network", "host", "--volume",
         f"{base}:/models:ro", "--entrypoint", "graphserve", GRAPH, "serve", "graph",
         "--model-base-path", "/models/mlp", "--model-name", "mlp", "--host", "127.0.0.1",
         "--grpc-port", str(container_port), "--rest-port", str(container_rest)],
        check=True, stdout=subprocess.DEVNULL,
    )  # fmt: skip
    out = work / "compare"
    try:
        for port in (host_port, container_port):
            wait_until_available(f"127.0.0.1:{port}", ["mlp"], timeout=180)
        subprocess.run(
            [GRAPHSERVE, "loadtest", "compare", "--arm", f"container=127.0.0.1:{container_port}",
             "--arm", f"host=127.0.0.1:{host_port}", "--model-name", "mlp", "--users", "1,16",
             "--duration", duration, "--out", str(out)],
            check=True, stdout=subprocess.DEVNULL,
        )  # fmt: skip
    finally:
        server.terminate()
        server.wait(timeout=30)
        subprocess.run(["docker", "rm", "--force", name], capture_output=True, check=False)
    report = json.loads((out / "report.json").read_text())
    rows = []
    for step in report["steps"]:
        arms = step["arms"]
        row: dict[str, Any] = {"users": step["load"]}
        for arm in ("host", "container"):
            row[arm] = {
                "rps": arms[arm]["throughput_rps"],
                "p50_ms": arms[arm]["latency_ms"]["p50"],
                "p99_ms": arms[arm]["latency_ms"]["p99"],
                "failures": arms[arm]["failures"],
            }
        row["p50_ratio"] = row["container"]["p50_ms"] / row["host"]["p50_ms"]
        row["rps_ratio"] = row["container"]["rps"] / row["host"]["rps"]
        rows.append(row)
    return {"duration_per_arm": duration, "steps": rows}


def render(results: dict[str, Any]) -> str:
    def s(value: float | None) -> str:
        return "—" if value is None else f"{value:.0f} s" if value >= 10 else f"{value:.1f} s"

    lines = [
        "# Containers on this machine",
        "",
        f"{results['date']}, {results['machine']}; Docker Engine {results['engine']}, "
        f"{results['compose']}. `python -m tools.bench.containers`.",
        "",
        "| image build | cold | cached |",
        "| --- | ---: | ---: |",
    ]
    for what, times in results["builds"].items():
        lines.append(f"| {what} | {s(times['cold_s'])} | {s(times['cached_s'])} |")
    deploy = results["deploy"]
    lines += [
        "",
        f"`deploy tfserving` (stand-in, host network) to every model AVAILABLE: "
        f"{deploy['deploy_to_available_s']:.1f} s; `deploy down`: {deploy['down_s']:.1f} s.",
        "",
        f"mlp, gRPC Predict, batch 1, {results['load']['duration_per_arm']} measured per arm and "
        "step, interleaved: the graph server on the host against the same server in its "
        "container on the host's network.",
        "",
        "| users | host req/s | container req/s | host p50 ms | container p50 ms | "
        "p50 container/host | req/s container/host |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in results["load"]["steps"]:
        h, c = row["host"], row["container"]
        lines.append(
            f"| {row['users']:g} | {h['rps']:.0f} | {c['rps']:.0f} | {h['p50_ms']:.2f} | "
            f"{c['p50_ms']:.2f} | {row['p50_ratio']:.3f}× | {row['rps_ratio']:.3f}× |"
        )
    return "\n".join(lines) + "\n"


def run_containers(out: Path, skip_cold: bool, duration: str) -> str:
    """Measure, write OUT/containers.json and containers.md, and return the markdown."""
    from graphserve.deploy.docker import require_compose
    from graphserve.exporter import ExportSpec, export_model

    docker, tool = require_compose()
    results: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d"),
        "machine": f"{os.cpu_count()} cores",
        "engine": docker.server_version,
        "compose": tool.describe(),
    }
    print("image builds ...", file=sys.stderr)
    results["builds"] = image_builds(skip_cold)
    work = Path(tempfile.mkdtemp(prefix="graphserve-bench-containers-"))
    work.chmod(0o755)
    try:
        base = work / "models"
        export_model(ExportSpec(source="examples:mlp", name="mlp", base_path=base))
        for path in [base, *base.rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)
        print("deploy tfserving ...", file=sys.stderr)
        results["deploy"] = deploy_times(base, work)
        print("host vs container load ...", file=sys.stderr)
        results["load"] = host_vs_container(base, work, duration)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    from tools.bench.published import write

    write("containers", results, out)
    return render(results)
