"""`graphserve tune batching`: the knobs' ranges, the refusals, and real searches on the
embedded graph server, on its own and as a running server the tuner writes versions for."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from graphserve.cli import app
from graphserve.core.batchingparams import load_batching_parameters
from graphserve.core.client import model_status
from graphserve.core.processes import ServerProcess
from graphserve.core.versions import version_dirs
from graphserve.loadtest.tune.search import Candidate, TuneResult, _wait_for, candidates_for
from tests.conftest import MlpExport

RECIPE = Candidate(max_batch_size=16, batch_timeout_micros=0, num_batch_threads=2)


def test_each_knob_is_tried_over_tf_servings_ranges() -> None:
    sizes = [c.max_batch_size for c in candidates_for("max_batch_size", RECIPE, 16, 2)]
    assert sizes == [4, 8, 16, 32]
    timeouts = [
        c.batch_timeout_micros for c in candidates_for("batch_timeout_micros", RECIPE, 16, 2)
    ]
    assert timeouts == [0, 500, 1000, 2000, 5000, 10000]
    assert [c.num_batch_threads for c in candidates_for("num_batch_threads", RECIPE, 16, 2)] == [
        1, 2, 4,
    ]  # fmt: skip
    allowed = candidates_for(
        "allowed_batch_sizes", RECIPE.model_copy(update={"max_batch_size": 12}), 16, 2
    )
    assert [c.allowed_batch_sizes for c in allowed] == [None, [1, 2, 4, 8, 12]]
    # every other knob is kept
    assert {(c.batch_timeout_micros, c.num_batch_threads) for c in allowed} == {(0, 2)}


def test_a_candidate_is_a_parameters_file_tf_serving_reads(tmp_path: Path) -> None:
    candidate = Candidate(
        max_batch_size=8, batch_timeout_micros=500, num_batch_threads=2,
        allowed_batch_sizes=[2, 4, 8],
    )  # fmt: skip
    path = tmp_path / "batching_parameters.txt"
    path.write_text(candidate.parameters(clients=16).to_text())
    read = load_batching_parameters(path)
    assert (read.max_batch_size, read.batch_timeout_micros, read.num_batch_threads) == (8, 500, 2)
    assert read.allowed_batch_sizes == (2, 4, 8)
    assert read.max_enqueued_batches >= 16 // 8  # room for every client's request


@pytest.mark.parametrize(
    ("slo", "message"),
    [
        ([], "Missing option '--slo'"),
        (["--slo", "ratio.p50<0.5"], "tune batching needs latency or throughput gates"),
        (["--slo", "graph.p99<20ms"], "tune batching needs latency or throughput gates"),
        (["--slo", "p99<<2"], "expected [ARM.]METRIC<VALUE"),
    ],
)
def test_refusals_name_the_problem(
    mlp_export: MlpExport, tmp_path: Path, slo: list[str], message: str
) -> None:
    result = CliRunner().invoke(
        app,
        ["tune", "batching", "--model-base-path", str(mlp_export.model_dir), "--out",
         str(tmp_path / "out"), *slo],
    )  # fmt: skip
    assert result.exit_code == 2, result.output
    assert message in " ".join(result.output.split())
    assert not (tmp_path / "out" / "trials").exists()


def test_a_model_without_versions_is_refused(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    result = CliRunner().invoke(
        app,
        ["tune", "batching", "--model-base-path", str(tmp_path / "empty"), "--slo", "p99<1s",
         "--out", str(tmp_path / "out")],
    )  # fmt: skip
    assert result.exit_code == 1
    assert "holds no numbered version directory to tune" in " ".join(result.output.split())


# The search ends well before it on a quiet machine; the budget only caps it. 40 s let a slow
# phase of a shared 2-core machine (every trial a version loaded and warmed up) run 2 trials.
BUDGET_S = 75


def _tune(base: Path, out: Path, *extra: str) -> tuple[int, str]:
    result = CliRunner().invoke(
        app,
        ["tune", "batching", "--model-base-path", str(base), "--clients", "4",
         "--budget", f"{BUDGET_S}s", "--trial", "1.5s", "--out", str(out), *extra],
    )  # fmt: skip
    return result.exit_code, result.output


@pytest.mark.slow
def test_the_tuner_writes_the_best_candidate_that_holds(
    mlp_export: MlpExport, tmp_path: Path
) -> None:
    before = sorted(version_dirs(mlp_export.model_dir))
    code, output = _tune(mlp_export.model_dir, tmp_path, "--slo", "p99<10s")
    assert code == 0, output
    result = TuneResult.model_validate_json((tmp_path / "tune.json").read_text())
    off, first, *_ = result.trials
    assert off.candidate is None and off.held and off.throughput_rps
    assert first.candidate is not None
    assert (first.candidate.max_batch_size, first.candidate.batch_timeout_micros) == (4, 0)
    assert len(result.trials) >= 3 and result.elapsed_s < BUDGET_S + 30
    assert result.best is not None
    best = result.trials[result.best]
    assert best.held and best.candidate is not None
    assert all(
        (t.throughput_rps or 0) <= (best.throughput_rps or 0) * 1.02
        for t in result.trials if t.held and t.candidate is not None
    )  # fmt: skip
    written = load_batching_parameters(tmp_path / "batching_parameters.txt")
    assert written == best.candidate.parameters(clients=4)
    assert str(tmp_path / "batching_parameters.txt") in output
    markdown = (tmp_path / "tune.md").read_text()
    assert "| 0 | off |" in markdown and "**best**" in markdown
    assert result.reason.startswith(best.candidate.label())
    assert "the throughput of batching off" in result.reason
    for trial in result.trials:
        assert (tmp_path / trial.report).is_file()
    # The model it tuned is left as it was: the candidates were versions of a copy.
    assert sorted(version_dirs(mlp_export.model_dir)) == before


@pytest.mark.slow
def test_no_candidate_holds_an_impossible_budget(mlp_export: MlpExport, tmp_path: Path) -> None:
    code, output = _tune(mlp_export.model_dir, tmp_path, "--slo", "p99<0.001ms", "--budget", "15s")
    assert code == 3, output
    result = json.loads((tmp_path / "tune.json").read_text())
    assert result["best"] is None and result["parameters_file"] is None
    assert result["reason"].startswith("no candidate held p99<0.001ms at 4 clients")
    assert not (tmp_path / "batching_parameters.txt").exists()


@pytest.mark.slow
def test_a_running_server_is_tuned_through_new_versions(
    mlp_export: MlpExport, tmp_path: Path
) -> None:
    """As with a TF Serving started with --enable_batching and
    --enable_per_model_batching_parameters: the candidates arrive as versions in the base path
    it watches, and are gone at the end, so it serves its own newest version again."""
    base = tmp_path / "models" / "mlp"
    shutil.copytree(mlp_export.model_dir, base)
    (original,) = version_dirs(base)
    pool = tmp_path / "pool.txt"
    pool.write_text("num_batch_threads { value: 2 }\nmax_batch_size { value: 8 }\n")
    args = ["graph", "--model-base-path", str(base), "--model-name", "mlp", "--enable-batching",
            "--batching-parameters-file", str(pool), "--enable-per-model-batching-parameters",
            "--file-system-poll-wait-seconds", "0.5"]  # fmt: skip
    with ServerProcess.on_free_ports(args, "mlp", tmp_path / "server.log") as server:
        code, output = _tune(
            base, tmp_path / "out", "--slo", "p99<10s", "--address", server.grpc_address,
            "--budget", "20s",
        )  # fmt: skip
        assert code == 0, output
        result = TuneResult.model_validate_json((tmp_path / "out" / "tune.json").read_text())
        assert result.server == server.grpc_address
        assert all(t.candidate is not None for t in result.trials)  # no "off": it batches
        # the server's own thread pool is not the tuner's to change
        assert {t.candidate.num_batch_threads for t in result.trials if t.candidate} == {None}
        assert "num_batch_threads the server's" in result.reason
        # Its candidates are gone, and the server is back on the model's own version.
        assert sorted(version_dirs(base)) == [original]
        _wait_for(server.grpc_address, "mlp", original)
        assert [v.version for v in model_status(server.grpc_address, "mlp")
                if v.state == "AVAILABLE"] == [original]  # fmt: skip
