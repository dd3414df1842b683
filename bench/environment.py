"""How the benchmark launches things: the ``hop`` command, the Python to use, the subprocess environment."""

from __future__ import annotations

import compileall
import os
import re
import sys
from pathlib import Path

import psutil

REPO_ROOT = Path(__file__).resolve().parent.parent
BENCH_DIR = REPO_ROOT / "bench"


PROJECT_PACKAGES = ("hop", "shuffle", "monitoring", "jobs", "bench")


def compile_project() -> None:
    """Byte-compile the project's modules, as installing a package does, so that no contender's processes compile
    them at start. Without this, on a machine with PYTHONDONTWRITEBYTECODE set (this one has it) every process hop
    starts compiles the engine's sources again: about 0.1 s of CPU each, which is not the installed engine's cost.
    (Python reads existing bytecode whatever that variable says.)"""
    for package in PROJECT_PACKAGES:
        compileall.compile_dir(REPO_ROOT / package, quiet=1)


def slot_kind(process: psutil.Process) -> str | None:
    """``"m"``, ``"r"`` or ``"s"`` for a task process of a map, reduce or stream slot, else ``None``: task processes
    are forked from their worker, so they share its command line, and are told apart by their process name, their
    slot's (``local-0/r0``, ``hop.lifetime.name_process``). Raises ``psutil.Error`` if the process is gone."""
    match = re.fullmatch(r".*/([mrs])\d+", process.name())
    return match.group(1) if match else None


def hop_command() -> list[str]:
    """``python -m hop`` with this interpreter: with the repository first on PYTHONPATH (``subprocess_env``) this
    runs the tree the benchmark lives in, even from a separate clone, not whatever ``hop`` is installed."""
    return [sys.executable, "-m", "hop"]


def python_module(module: str) -> list[str]:
    """Run ``module`` with this interpreter (``python -m module``)."""
    return [sys.executable, "-m", module]


def subprocess_env() -> dict[str, str]:
    """This environment, the repository on PYTHONPATH (Spark's workers inherit it), Spark on this Python."""
    env = dict(os.environ)
    paths = [str(REPO_ROOT), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    env["PYSPARK_PYTHON"] = sys.executable
    env["PYSPARK_DRIVER_PYTHON"] = sys.executable
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env
