"""`python -m tools.bench peers`: the harness on graphserve's own servers (every run), and each
peer's adapter against a real install of the peer (marked `peers`: each installs TensorFlow and the
peer into a virtual environment of its own, ~2.3 GB and 1-2 minutes each; GRAPHSERVE_PEERS=1 or
`make test-peers` runs them, CI does not)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tools.bench.measure import alive, tree, tree_cpu_s
from tools.bench.peers import PEER_NAMES, load_peer
from tools.bench.peers.run import PeersSpec, _inputs, _reference, run_peers
from tools.bench.peers.servers import peer_targets, start_peer

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_the_harness_measures_graphserve_and_the_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # a relative work directory, as make bench-peers gives
    spec = PeersSpec.quick(Path("work"), ("mlp",), ())
    results = run_peers(spec)
    assert spec.work_dir == tmp_path / "work"  # absolute: the apps run from their log dir
    m = results["models"]["mlp"]
    assert {s["failure"] for s in m["servers"].values()} == {None}
    assert set(m["targets"]) == {
        "graphserve/plain/rest-tfserving", "graphserve/plain/grpc-tfserving",
        "graphserve/batching/rest-tfserving", "graphserve/batching/grpc-tfserving",
    }  # fmt: skip
    for target in m["targets"].values():
        one = target["points"][0]
        assert one["clients"] == 1 and one["errors"] == 0 and one["requests"] > 0
        assert 0 < one["p50_ms"] <= one["p99_ms"]
        assert target["cpu_us_per_request_16"] is None or target["cpu_us_per_request_16"] > 0
    batched = m["targets"]["graphserve/batching/grpc-tfserving"]
    assert batched["points"][0]["mean_batch"] == pytest.approx(1.0)  # one client: no merging
    if batched["mean_batch_16"] is not None:  # 16 clients reached within the budget
        assert 1.0 <= batched["mean_batch_16"] <= 16.0
    assert m["limit"]["rows_per_s"] > 0
    assert {p["method"] for p in m["limit_points"]} == {"function", "session", "session-1"}
    for server in m["servers"].values():
        assert server["startup_s"] > 0 and server["memory_after_warmup"]["rss_mb"] > 50
        assert Path(server["log"]).is_absolute() and Path(server["log"]).exists()
    goals = {g["key"]: g for g in results["goals"]}
    assert goals["P3a"]["value"] is not None  # graphserve alone: the limit goal is measured
    assert "no graphserve or no peer route" in goals["P1a"]["detail"]  # no peer: a miss, said
    from tools.bench.peers.report import write_peers

    paths = write_peers(results, tmp_path / "out")
    assert json.loads(paths[0].read_text())["models"]["mlp"]["limit"]["rows_per_s"] > 0
    assert "| graphserve " in paths[1].read_text()
    assert paths[2].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bench_peers_refuses_unknown_names() -> None:
    from typer.testing import CliRunner

    from tools.bench.cli import app

    result = CliRunner().invoke(app, ["peers", "--peers", "kserve,torchserve", "--models", "x"])
    assert result.exit_code == 2
    said = " ".join(result.output.split())
    assert "--models 'x': expected some of mlp, mobilenet" in said
    assert "--peers 'kserve,torchserve': expected some of kserve, bentoml" in said


@pytest.fixture(scope="module")
def mlp_model(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    from graphserve.exporter import ExportSpec, export_model

    base = tmp_path_factory.mktemp("models")
    version_dir = export_model(ExportSpec("examples:mlp", "mlp", base_path=base)).path
    inputs = _inputs(version_dir)
    other = {k: (1.0 - v).astype(v.dtype) for k, v in inputs.items()}
    return version_dir, {"inputs": inputs, "other": other}


@pytest.mark.peers
@pytest.mark.timeout(600)  # the first use of a peer installs it, TensorFlow included
@pytest.mark.parametrize("name", PEER_NAMES)
def test_each_peer_answers_with_the_models_values(
    name: str, mlp_model: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    """The peer, installed as `make bench-peers` installs it, serves the exported mlp: every
    route answers two different requests with the model's own values for each, batching off
    and (where the peer has it) on, and stopping it leaves no process behind."""
    from tools.bench.peers.venvs import peer_env

    peer = load_peer(name)
    env = peer_env(
        peer, Path(os.environ.get("GRAPHSERVE_PEERS_WORK", ROOT / "tools" / "bench" / ".work"))
    )
    assert env.python.exists() and env.version != "unknown"
    version_dir, feeds = mlp_model
    expected = {k: _reference(version_dir, v) for k, v in feeds.items()}
    assert not np.allclose(expected["inputs"], expected["other"])
    for batching in (False, True) if peer.batching else (False,):
        served = start_peer(
            peer, env.python, env.version, version_dir, "mlp", feeds["inputs"], batching, tmp_path
        )
        try:
            assert [t.route for t in served.targets] == list(peer.routes)
            for feed, values in feeds.items():
                for target in peer_targets(peer, served, "mlp", values):
                    answer = target.read(target.make_call()())
                    np.testing.assert_allclose(
                        answer, expected[feed], rtol=1e-4, atol=1e-5,
                        err_msg=f"{name} {target.route.label} ({served.config}), {feed}",
                    )  # fmt: skip
            assert tree_cpu_s(served.pid) > 0
            processes = tree(served.pid)
        finally:
            served.stop()
        assert [pid for pid in processes if alive(pid)] == []  # workers in other sessions too
