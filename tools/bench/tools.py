"""The field's reference load generators, found or installed on first use, never our dependencies.

    perf_analyzer  Triton's C++ generator (`--service-kind tfserving`: TF Serving's gRPC Predict).
                   From the `tritonclient` 2.41.0 manylinux wheel, the last tritonclient that
                   carries the binary (the newer `perf-analyzer` wheels need glibc 2.38, which
                   Debian 12 has not: see TRITONCLIENT). It needs Debian's libb64-0d and
                   libcudart.so.12 (the nvidia-cuda-runtime-cu12 wheel, on LD_LIBRARY_PATH; no
                   GPU is used). Installed into a virtual environment of its own under the cache
                   directory.
    wrk            an event-loop HTTP generator in C (Debian's package `wrk`), for REST.

As root (CI) the Debian packages are installed with apt-get; anyone else is told which.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import venv
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "TRITONCLIENT",
    "Tool",
    "ToolMissing",
    "debian_library",
    "perf",
    "perf_analyzer",
    "wrk",
]

# Not the `perf-analyzer` package (2.58 to 2.60), which carries the binary too and needs neither
# libb64 nor libcudart: its wheels are manylinux_2_38 and the binary needs GLIBC_2.38 and
# GLIBCXX_3.4.32. On Debian 12 (glibc 2.36: this machine, and the images' base here) pip finds
# only its 0.1.0 placeholder, which has no binary, and the 2.60 binary run anyway stops with
# "version `GLIBC_2.38' not found". It runs on glibc 2.38 or later (tried on Debian 13 against
# the graph server with the flags tools/bench/generator.py passes: it prints the same lines).
TRITONCLIENT = "2.41.0"
_CUDA_RUNTIME = "nvidia-cuda-runtime-cu12>=12,<13"


class ToolMissing(RuntimeError):
    """A reference generator is not here and could not be installed: the message says how."""


@dataclass(frozen=True)
class Tool:
    name: str
    version: str
    program: Path
    env: dict[str, str]  # what to add to the environment when running it

    def environ(self) -> dict[str, str]:
        return {**os.environ, **self.env}


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "graphserve" / "bench-tools"


def _apt(package: str, why: str) -> None:
    """Install a Debian package as root; otherwise raise ToolMissing naming it."""
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise ToolMissing(f"{why}: install Debian's package {package} (apt-get install {package})")
    for command in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", package]):
        done = subprocess.run(
            command,
            capture_output=True,
            text=True,
            check=False,
            env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
        )
        if done.returncode != 0 and command[1] == "install":
            raise ToolMissing(f"{why}: apt-get install {package} failed: {done.stderr[-400:]}")


def _has_library(soname: str) -> bool:
    done = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, check=False)
    return soname in done.stdout


def debian_library(path: Path, package: str, why: str) -> Path:
    """`path`, a shared library of Debian's `package`, installed first when missing (as root);
    ToolMissing naming the package otherwise."""
    if not path.is_file():
        _apt(package, why)
    if not path.is_file():
        raise ToolMissing(f"{why}: {package} is installed but {path} is not there")
    return path


def perf_analyzer(root: Path | None = None) -> Tool:
    """Triton's perf_analyzer from tritonclient 2.41.0 in `root` (default: the cache), installed
    there on first use. Raises ToolMissing when it cannot be."""
    root = root or cache_dir() / f"tritonclient-{TRITONCLIENT}"
    python = root / "bin" / "python"
    program = root / "bin" / "perf_analyzer"
    if not _has_library("libb64.so.0d"):
        _apt("libb64-0d", "perf_analyzer needs libb64.so.0d")
    if not program.exists():
        if sys.platform != "linux" or os.uname().machine != "x86_64":
            raise ToolMissing("perf_analyzer's wheel is for x86_64 Linux only")
        venv.create(root, with_pip=True, clear=True)
        wheels = [f"tritonclient=={TRITONCLIENT}", _CUDA_RUNTIME]
        done = subprocess.run(
            [str(python), "-m", "pip", "install", "--quiet", "--only-binary=:all:", *wheels],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0 or not program.exists():
            raise ToolMissing(
                f"pip could not install {' '.join(wheels)} into {root}: {done.stderr[-600:]}"
            )
    cudart = sorted(root.glob("lib/python*/site-packages/nvidia/cuda_runtime/lib"))
    if not cudart:
        raise ToolMissing(f"no libcudart.so.12 under {root} (the {_CUDA_RUNTIME} wheel)")
    return Tool("perf_analyzer", TRITONCLIENT, program, {"LD_LIBRARY_PATH": str(cudart[0])})


def perf() -> Path:
    """Linux's perf (Debian's linux-perf), installed as root on first use: the profiler of
    `python -m tools.bench frontend`. Raises ToolMissing when it cannot be."""
    if shutil.which("perf") is None:
        _apt("linux-perf", "the front end's profile is perf's")
    program = shutil.which("perf")
    if program is None:
        raise ToolMissing("perf is not on PATH after installing linux-perf")
    return Path(program)


def wrk() -> Tool:
    """Debian's wrk, installed as root on first use. Raises ToolMissing when it cannot be."""
    if shutil.which("wrk") is None:
        _apt("wrk", "the REST reference generator is wrk")
    program = shutil.which("wrk")
    if program is None:
        raise ToolMissing("wrk is not on PATH after installing it")
    done = subprocess.run([program, "-v"], capture_output=True, text=True, check=False)
    words = (done.stdout + done.stderr).split()
    version = words[1] if len(words) > 1 and words[0] == "wrk" else "unknown"
    return Tool("wrk", version, Path(program), {})
