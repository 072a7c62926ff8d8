"""`python -m tools.bench tls` at a tiny scale: three real servers (plaintext, TLS, mutual TLS) on
loopback, every arm, protocol and figure measured, the JSON written and read back, the page
rendered from it. A toy run's numbers are not data: no speed is asserted, only that each figure
is there, positive, and the ratio of what it names."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tools.bench.cli import app
from tools.bench.published import footer
from tools.bench.tls import (
    ARMS,
    FIGURES,
    PROTOCOLS,
    TlsPlan,
    figure_lines,
    render_tls,
    run_tls,
    write_tls,
)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory, mlp_export: Any) -> dict[str, Any]:
    work = tmp_path_factory.mktemp("tls")
    return run_tls(TlsPlan.quick(work, model_dir=mlp_export.model_dir))


@pytest.mark.slow
def test_every_arm_and_protocol_is_timed_at_one_client(tiny: dict[str, Any]) -> None:
    for part in ("keepalive", "connect"):
        assert list(tiny[part]) == list(PROTOCOLS)
        for protocol in PROTOCOLS:
            assert list(tiny[part][protocol]) == list(ARMS)
            for timing in tiny[part][protocol].values():
                assert 0 < timing["p50_ms"] <= timing["p99_ms"]
                assert timing["samples"] >= 30  # bench.timing.interleave's minimum


@pytest.mark.slow
def test_every_arm_and_protocol_is_loaded_with_the_servers_cpu_read(tiny: dict[str, Any]) -> None:
    load, plan = tiny["load"], tiny["plan"]
    assert load["clients"] == plan["clients"] == 4
    for protocol in PROTOCOLS:
        for arm in ARMS:
            row = load["arms"][protocol][arm]
            assert row["requests"] > 0 and row["errors"] == 0
            assert row["rps"] > 0 and row["p50_ms"] > 0
            assert row["server_cpu_us_per_request"] > 0 and row["client_cpu_us_per_request"] > 0
    windows = [(w["round"], w["protocol"], w["arm"]) for w in load["windows"]]
    first = [(p, a) for p in PROTOCOLS for a in ARMS]
    assert windows == [(0, p, a) for p, a in first] + [(1, p, a) for p, a in reversed(first)]


@pytest.mark.slow
def test_every_figure_is_positive_and_its_ratios_are_to_plaintext(tiny: dict[str, Any]) -> None:
    for protocol in PROTOCOLS:
        assert [key for key, _, _ in FIGURES] == list(tiny["figures"][protocol])
        for figure in tiny["figures"][protocol].values():
            assert all(figure[arm] > 0 for arm in ARMS)
            for arm in ("tls", "mtls"):
                assert figure[f"{arm}_ratio"] == pytest.approx(figure[arm] / figure["plaintext"])
    rest_cpu = tiny["figures"]["rest"]["server_cpu_us"]
    assert (
        rest_cpu["plaintext"]
        == tiny["load"]["arms"]["rest"]["plaintext"]["server_cpu_us_per_request"]
    )
    low, high = rest_cpu["tls_ratio_rounds"]
    assert 0 < low <= high
    assert len(figure_lines(tiny)) == len(PROTOCOLS) * len(FIGURES)


@pytest.mark.slow
def test_the_tls_arms_speak_tls_and_mutual_tls_asks_for_a_certificate(
    tiny: dict[str, Any],
) -> None:
    assert set(tiny["negotiated"]["rest"]) == {"tls", "mtls"}
    assert all(v.startswith("TLSv1.") for v in tiny["negotiated"]["rest"].values())
    commands = {arm: server["command"] for arm, server in tiny["servers"].items()}
    assert "--ssl-config-file" not in commands["plaintext"]
    configs = {
        arm: Path(args[args.index("--ssl-config-file") + 1]).read_text()
        for arm, args in commands.items()
        if arm != "plaintext"
    }
    assert "client_verify: true" in configs["mtls"] and "custom_ca:" in configs["mtls"]
    assert "client_verify" not in configs["tls"] and "-----BEGIN" in configs["tls"]


@pytest.mark.slow
def test_the_results_say_where_and_when_and_the_page_is_the_json_rendered(
    tiny: dict[str, Any], tmp_path: Path
) -> None:
    assert tiny["environment"]["cpus"] and len(tiny["load_average"]["start"]) == 3
    assert tiny["goals"] == [] and tiny["no_goals"]
    json_path, md_path = write_tls(tiny, tmp_path)
    written = json.loads(json_path.read_text())
    stamp = written.pop("provenance")
    assert written == json.loads(json.dumps(tiny))
    assert stamp["command"] == "python -m tools.bench tls --out tools/bench/results"
    assert len(stamp["commit"]) == 40 and stamp["machine"]["cpus"]
    page = md_path.read_text()
    assert page == render_tls(written) + footer(stamp)
    assert "## Figures" in page and "mutual TLS ÷ plaintext" in page


def test_an_unknown_key_type_is_refused_before_anything_starts(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["tls", "--key", "dsa", "--out", str(tmp_path)])
    assert result.exit_code == 2
    assert "--key 'dsa': expected one of ecdsa, rsa" in result.output
    assert not (tmp_path / "tls.json").exists()
