"""How hop starts a fresh interpreter of its own modules: ``python -P -m MODULE``, with this project first on its path.

``python -m`` puts the current directory first on ``sys.path``, before the standard library: a ``json.py`` or
``selectors.py`` of the user's in the directory ``hop run`` was started in was imported in place of the standard
library's by the embedded cluster's launcher, which then failed to start (exit code 3, whatever the job), and by a
task process a worker restarted (after its task was killed), which failed at every restart while the job waited.
``-P`` (Python 3.11) leaves that directory out; this project's root (the folder holding ``hop`` and ``shuffle``)
goes first on ``PYTHONPATH`` instead, so the interpreter imports the same hop as the process that started it, also
when that one found hop through its current directory (``python -m hop`` in a checkout that is not installed).

Contract: a process so started that hands its environment on to user code (a task process) calls
:func:`restore_environment` first, so a job's code, and the programs it runs, see the user's ``PYTHONPATH``. The
launcher need not: it takes the command's environment as its own once it has imported (``hop.cluster_launch``).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping

__all__ = ["PROJECT_ROOT", "module_command", "module_environment", "restore_environment", "root_needed"]

PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
"""The folder holding the ``hop`` and ``shuffle`` packages this process runs (no pathlib: ``hop.prelaunch`` imports
this module before the command's own imports)."""

_GIVEN = "HOP_GIVEN_PYTHONPATH"
"""The ``PYTHONPATH`` :func:`module_environment` changed, as JSON (``null``: there was none)."""


def module_command(module: str) -> list[str]:
    """The command that runs ``module`` as ``python -m`` would, but without the current directory on its path."""
    return [sys.executable, "-P", "-m", module]


def module_environment(environment: Mapping[str, str]) -> dict[str, str]:
    """``environment`` with this project's root first on ``PYTHONPATH``: where :func:`module_command`'s interpreter
    finds the hop this process runs. The ``PYTHONPATH`` it had is kept for :func:`restore_environment`. Unchanged
    when hop is installed in a site directory, which that interpreter searches anyway (:func:`root_needed`)."""
    if not root_needed(PROJECT_ROOT):
        return dict(environment)
    given = environment.get(_GIVEN)
    original = json.loads(given) if given is not None else environment.get("PYTHONPATH")
    path = os.pathsep.join(filter(None, [PROJECT_ROOT, original]))
    return {**environment, "PYTHONPATH": path, _GIVEN: json.dumps(original)}


def root_needed(root: str) -> bool:
    """Whether ``root`` (the folder hop was imported from) must go on ``PYTHONPATH`` for a ``-P`` interpreter to
    import hop from it: not when it is a site directory. Put first on ``PYTHONPATH``, a site directory would come
    before the standard library, and a package installed there under a standard module's name (an old backport)
    would replace that module, as the current directory's ``json.py`` did."""
    import site  # (imported at start-up already, unless python -S)

    sites = [*site.getsitepackages(), site.getusersitepackages()]
    return os.path.realpath(root) not in {os.path.realpath(folder) for folder in sites}


def restore_environment() -> None:
    """Give this process back the ``PYTHONPATH`` its environment had before :func:`module_environment` (none if it
    had none); nothing if that did not make it. Its own ``sys.path`` is made already: it stays."""
    given = os.environ.pop(_GIVEN, None)
    if given is None:
        return
    original = json.loads(given)
    if original is None:
        os.environ.pop("PYTHONPATH", None)
    else:
        os.environ["PYTHONPATH"] = original
