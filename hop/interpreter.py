"""How hop starts a fresh interpreter of its own modules: ``python -P -m MODULE``, with this project first on its path.

``python -m`` puts the current directory first on ``sys.path``, before the standard library: a ``json.py`` or
``selectors.py`` of the user's in the directory ``hop run`` was started in was imported in place of the standard
library's by the embedded cluster's launcher, which then failed to start (exit code 3, whatever the job). ``-P``
(Python 3.11) leaves that directory out; this project's root (the folder holding ``hop`` and ``shuffle``) goes
first on ``PYTHONPATH`` instead, so the interpreter imports the same hop as the process that started it, also when
that one found hop through its own current directory (``python -m hop`` in a checkout that is not installed).

Contract: give that environment only to a process that hands its own on to no user code: the launcher takes the
command's environment as its own once it has imported (``hop.cluster_launch``), so a job's code, and the programs it
runs, see the user's ``PYTHONPATH``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

__all__ = ["PROJECT_ROOT", "module_command", "module_environment"]

PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
"""The folder holding the ``hop`` and ``shuffle`` packages this process runs (no pathlib: ``hop.prelaunch`` imports
this module before the command's own imports)."""


def module_command(module: str) -> list[str]:
    """The command that runs ``module`` as ``python -m`` would, but without the current directory on its path."""
    return [sys.executable, "-P", "-m", module]


def module_environment(environment: Mapping[str, str]) -> dict[str, str]:
    """``environment`` with this project's root first on ``PYTHONPATH``: where :func:`module_command`'s interpreter
    finds the hop this process runs."""
    path = os.pathsep.join(filter(None, [PROJECT_ROOT, environment.get("PYTHONPATH")]))
    return {**environment, "PYTHONPATH": path}
