"""The layers as docs/architecture.md draws them, beyond what import-linter checks in `make lint`:
the core imports no TensorFlow API and no command-line library, nothing imports the packages by
their folder names, and the wheel installs one name, `graphserve`, without tools/ (benchmarks,
fuzzers, docs generators)."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = ("exporter", "serving", "loadtest", "deploy", "conformance")
# What the core may take from TensorFlow's packages: generated protocol buffers, nothing else.
PROTO_PACKAGES = ("tensorflow.core.", "tensorflow_serving.")


def _imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), str(path))
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
    return found


def _python_files(*folders: str) -> list[Path]:
    return [p for folder in folders for p in sorted((ROOT / folder).rglob("*.py"))]


def test_the_core_imports_no_tensorflow_api() -> None:
    offending = [
        f"{path.relative_to(ROOT)}:{line} imports {module}"
        for path in _python_files("graphserve/core")
        for line, module in _imports(path)
        if module.split(".")[0] in ("tensorflow", "keras", "tf_keras")
        and not module.startswith(PROTO_PACKAGES)
    ]
    assert offending == []


def test_the_core_imports_no_command_line_library() -> None:
    """The core is what a deployment script or a server imports: typer (and click under it) is
    the command line's, and so is rich, which renders the commands' messages and typer's usage
    errors. Both live in graphserve.clikit and the packages' cli.py files; the servers' logs are
    the standard library's (graphserve.core.logs). The core's own imports, that is: importing
    TensorFlow's protocol buffers loads TensorFlow, and Keras under it imports rich."""
    offending = [
        f"{path.relative_to(ROOT)}:{line} imports {module}"
        for path in _python_files("graphserve/core")
        for line, module in _imports(path)
        if module.split(".")[0] in ("typer", "click", "rich")
    ]
    assert offending == []


def test_the_core_loads_without_the_tensorflow_runtime_modules() -> None:
    """The core modules that need no protocol buffers load without TensorFlow at all."""
    code = (
        "import sys\n"
        "import graphserve.core.signature, graphserve.core.errors, graphserve.core.versions\n"
        "import graphserve.core.logs, graphserve.core.contract, graphserve.core.defaults\n"
        "import graphserve.core.batchingparams, graphserve.core.processes\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'keras')))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd="/"
    )
    assert out.stdout.strip() == "[]"


def test_nothing_imports_a_package_by_its_folder_name() -> None:
    """`exporter`, `serving`, ... are folders; the importable names are graphserve.exporter and so
    on. An import by the folder name works from a clone and breaks in the installed wheel."""
    offending = [
        f"{path.relative_to(ROOT)}:{line} imports {module}"
        for path in _python_files(*FOLDERS[:5], "tests")
        + _python_files("graphserve/core", "graphserve/model")
        for line, module in _imports(path)
        if module.split(".")[0] in FOLDERS[:5]
    ]
    assert offending == []


@pytest.mark.slow
def test_the_wheel_installs_only_graphserve(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(tmp_path), "."],
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("graphserve-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top = {name.split("/")[0] for name in names}
    assert {t for t in top if not t.endswith(".dist-info")} == {"graphserve"}
    for package in ("core", "model", *FOLDERS[:5]):
        assert f"graphserve/{package}/__init__.py" in names
    for locustfile in (
        "generator/locustfile.py",
        "generator/sweepfile.py",
        "rollouts/locustfile.py",
    ):
        assert f"graphserve/loadtest/{locustfile}" in names  # run by path, by locust
    assert "graphserve/loadtest/py.typed" in names
    assert not [n for n in names if n.startswith(("tools/", "graphserve/tools"))]


def test_no_module_imports_itself_back() -> None:
    """No import cycle between modules, imports under TYPE_CHECKING included: they never run,
    but a type one module takes from another is a dependency all the same, and a cycle of them
    says the two modules are one (or that the type belongs below both)."""
    grimp = pytest.importorskip("grimp")  # import-linter's graph builder, a dev dependency
    # No cache: grimp's may hold a module's imports from before an edit.
    graph = grimp.build_graph("graphserve", exclude_type_checking_imports=False, cache_dir=None)
    imports = {m: graph.find_modules_directly_imported_by(m) for m in graph.modules}
    cycles = []
    for module in sorted(imports):
        for imported in imports[module]:
            if module < imported and graph.chain_exists(imported, module):
                chain = graph.find_shortest_chain(importer=imported, imported=module)
                cycles.append(f"{module} -> {' -> '.join(chain)}")
    assert cycles == []


def test_no_name_in_a_package_hides_one_of_its_subpackages() -> None:
    """`graphserve.loadtest` exports the functions `compare` and `rollout`; a subpackage of the
    same name would be hidden behind them (`import graphserve.loadtest.compare.run as x` then
    fails), so every subpackage must be what its package's attribute of that name is."""
    import importlib
    import pkgutil

    import graphserve

    for info in pkgutil.walk_packages(graphserve.__path__, "graphserve."):
        if not info.ispkg:
            continue
        package = importlib.import_module(info.name)
        parent, _, name = info.name.rpartition(".")
        assert getattr(importlib.import_module(parent), name) is package, info.name


def test_flask_is_the_benchmarks_dependency_not_the_packages() -> None:
    """The plain Flask server is the benchmark's baseline (tools/bench/flask_peer.py): flask comes
    with the bench extra, and nothing in the installed package imports it."""
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = [re.split(r"[<>=;\[ ]", d, maxsplit=1)[0] for d in project["dependencies"]]
    assert "flask" not in names
    assert any(d.startswith("flask") for d in project["optional-dependencies"]["bench"])
    importers = [
        str(path.relative_to(ROOT))
        for folder in ("graphserve", *FOLDERS[:5])  # linked into graphserve/; rglob stays out
        for path in sorted((ROOT / folder).rglob("*.py"))
        if re.search(r"^\s*(from|import) flask\b", path.read_text(), re.M)
    ]
    assert importers == []
