"""`python -m tools.bench shapes` (`make bench-traffic`): graph against eager on mixed request
shapes (issue 50's T6), measured by `loadtest replay` on traffic `traffic make` writes.

Two families users bring, built from their packages with random weights:

    bert       keras_hub's BertTextClassifier, tiny (2 layers, hidden 32, 128 positions), token
               ids, mask and segment ids of shape [-1, -1]: 1, 2, 4, 8 or 16 rows of 8, 32 or 128
               tokens (15 shapes, about 20 requests each)
    mobilenet  keras.applications' MobileNetV2 (alpha 0.35, 96×96×3, tools/bench/mobilenet.py):
               1-32 rows

Each is exported (`graphserve export`, its parity check included), served by a graph server and
an eager server (`serve eager` on the same source, eager Python), and replayed against both, one
arm after the other, with one request in flight at a time (`--max-in-flight 1`): the latency of
each request is its own, never a queue's, so a shape's p50 is what that shape costs. The replay's
schedule is then not kept, on purpose (its lateness is not a figure here). Per shape: p50 and p99
of each arm, eager over graph, and each arm's first request of the shape (where the eager model
meets a shape it has not run, and a graph runs a shape its warm-up did not). Every answer is also
judged graph against eager.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from graphserve.core.processes import ServerProcess

__all__ = ["FAMILIES", "bert", "render_shapes", "run_shapes", "write_shapes"]

Say = Callable[[str], None]


def bert() -> Any:  # -> keras.Model; keras_hub imported late, as in the examples
    """keras_hub's BERT classifier, tiny and untrained, with 128 positions."""
    import keras
    import keras_hub

    keras.utils.set_random_seed(0)
    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=1000, num_layers=2, num_heads=2, hidden_dim=32, intermediate_dim=64,
        max_sequence_length=128,
    )  # fmt: skip
    return keras_hub.models.BertTextClassifier(backbone=backbone, num_classes=2, preprocessor=None)


@dataclass(frozen=True)
class Family:
    name: str
    source: str
    what: str
    batch_sizes: str
    seq_lens: str | None
    count: int


FAMILIES = (
    Family("bert", "tools.bench.shapes:bert", "keras_hub BertTextClassifier (tiny, 128 positions)",
           "1,2,4,8,16", "8,32,128", 300),
    Family("mobilenet", "tools.bench.mobilenet:mobilenet",
           "keras.applications MobileNetV2 (alpha 0.35, 96x96x3)", "1,2,4,8,16,32", None, 120),
)  # fmt: skip


def _graphserve(*args: str, log: Path) -> None:
    with log.open("w") as out:
        done = subprocess.run([sys.executable, "-m", "graphserve", *args], stdout=out,
                              stderr=subprocess.STDOUT, check=False, timeout=900)  # fmt: skip
    if done.returncode != 0:
        tail = " | ".join(log.read_text(errors="replace").splitlines()[-8:])
        raise RuntimeError(f"graphserve {' '.join(args)} exited {done.returncode}: {tail}")


@contextlib.contextmanager
def _servers(family: Family, models: Path, work: Path) -> Iterator[dict[str, ServerProcess]]:
    graph = ServerProcess.on_free_ports(
        ["graph", "--model-base-path", str(models / family.name), "--model-name", family.name],
        family.name, work / f"{family.name}-graph.log",
    )  # fmt: skip
    eager = ServerProcess.on_free_ports(
        ["eager", family.source, "--model-name", family.name], family.name,
        work / f"{family.name}-eager.log",
    )  # fmt: skip
    started = []
    try:
        for server in (graph, eager):
            started.append(server.start(300.0))
        yield {"graph": graph, "eager": eager}
    finally:
        for server in started:
            server.stop()


def _family(family: Family, work: Path, say: Say) -> dict[str, Any]:
    from graphserve.loadtest.replay import ReplaySpec, replay
    from graphserve.loadtest.traffic.make import MakeSpec, make_traffic, parse_distribution

    models = work / "models"
    say(f"T6 {family.name}: export")
    started = time.perf_counter()
    _graphserve("export", family.source, "--name", family.name, "--base-path", str(models),
                log=work / f"{family.name}-export.log")  # fmt: skip
    export_s = time.perf_counter() - started
    traffic = work / f"{family.name}.tfrecord"
    seq = parse_distribution(family.seq_lens, "--seq-lens") if family.seq_lens else None
    made = make_traffic(MakeSpec(
        models / family.name, traffic, count=family.count,
        batch_sizes=parse_distribution(family.batch_sizes, "--batch-sizes"), seq_lens=seq,
    ))  # fmt: skip
    with _servers(family, models, work) as servers:
        say(f"T6 {family.name}: {made.records} requests of {len(made.shapes)} shapes, graph "
            "then eager")  # fmt: skip
        report = replay(ReplaySpec(
            traffic=traffic, protocol="grpc", rate=1000.0, max_in_flight=1, timeout_s=120.0,
            arms={name: server.grpc_address for name, server in servers.items()},
        ))  # fmt: skip
    arms = {arm.name: arm for arm in report.arms}
    shapes = []
    for graph_row in arms["graph"].shapes:
        eager_row = next(s for s in arms["eager"].shapes if s.shape == graph_row.shape)
        ratio = (
            eager_row.p50_ms / graph_row.p50_ms
            if eager_row.p50_ms is not None and graph_row.p50_ms
            else None
        )
        shapes.append({
            "shape": graph_row.shape, "rows": graph_row.rows, "requests": graph_row.requests,
            "graph": graph_row.to_json(), "eager": eager_row.to_json(),
            "eager_over_graph_p50": ratio,
        })  # fmt: skip
    across = next((a for a in arms["graph"].answers if a.reference == "eager"), None)
    return {
        "name": family.name,
        "what": family.what,
        "batch_sizes": family.batch_sizes,
        "seq_lens": family.seq_lens,
        "requests": made.records,
        "export_s": export_s,
        "failed": {name: arm.failed for name, arm in arms.items()},
        "latency_ms": {name: arm.latency_ms for name, arm in arms.items()},
        "shapes": shapes,
        "answers": None if across is None else across.to_json(),
    }


def run_shapes(work: Path, say: Say = print, families: tuple[Family, ...] = FAMILIES) -> dict:
    """T6 for every family; the results."""
    work.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    results: dict[str, Any] = {"families": [_family(f, work, say) for f in families]}
    results["seconds"] = time.perf_counter() - started
    return results


def _ms(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}"


def render_shapes(results: dict[str, Any]) -> str:
    """traffic-shapes.md: per family and shape, graph and eager."""
    lines = ["# Graph against eager by request shape (issue 50's T6)", "",
             "`loadtest replay` of traffic `traffic make` wrote, against a graph and an eager "
             "server of each family, one arm after the other, one request in flight (each "
             "latency its own, no queue's). `python -m tools.bench shapes` regenerates this "
             "page.", ""]  # fmt: skip
    for f in results["families"]:
        seq = f", sequence lengths {f['seq_lens']}" if f["seq_lens"] else ""
        lines += [f"## {f['name']}: {f['what']}", "",
                  f"{f['requests']} requests of {f['batch_sizes']} rows{seq}; failed: "
                  + ", ".join(f"{k} {v}" for k, v in f["failed"].items()) + ".", "",
                  "| shape | requests | graph p50 ms | graph p99 ms | graph first ms "
                  "| eager p50 ms | eager p99 ms | eager first ms | eager / graph p50 |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
        for s in f["shapes"]:
            g, e = s["graph"], s["eager"]
            ratio = (
                "—" if s["eager_over_graph_p50"] is None else f"{s['eager_over_graph_p50']:.2f}×"
            )
            lines.append(
                f"| {s['shape']} | {s['requests']} | {_ms(g['p50_ms'])} | {_ms(g['p99_ms'])} "
                f"| {_ms(g['first_ms'])} | {_ms(e['p50_ms'])} | {_ms(e['p99_ms'])} "
                f"| {_ms(e['first_ms'])} | {ratio} |"
            )
        a = f["answers"]
        if a is not None:
            lines += ["", f"Answers, graph against eager: {a['mismatched']} of {a['compared']} "
                      "requests past the export's default tolerance; largest differences: "
                      + ", ".join(f"`{o['output'] or '(unnamed)'}` {o['max_abs_error']:.3g}"
                                  for o in a["outputs"]) + "."]  # fmt: skip
        lines.append("")
    lines.append(f"The whole run took {results['seconds']:.0f} s.")
    return "\n".join(lines) + "\n"


def write_shapes(results: dict[str, Any], out: Path) -> list[Path]:
    """OUT/traffic-shapes.json and OUT/traffic-shapes.md."""
    from tools.bench.published import write

    return write("traffic-shapes", results, out)
