"""Loading an mrjob job file: import it and find its one ``MRJob`` subclass. mrjob itself is imported only here,
and only when a job needs it (it is an optional dependency of hop)."""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from pathlib import Path
from typing import Any

from hop.loader import JobFileError, import_beside, import_failed, most_derived

__all__ = ["MRJobNotAvailable", "load_mrjob_file"]


REMOVED_MODULES = {"distutils": "standard-distutils", "pipes": "standard-pipes"}
"""Standard modules mrjob 0.7.4 imports that Python 3.12 (distutils) and 3.13 (pipes) removed, and the packages that
put them back."""


class MRJobNotAvailable(JobFileError):
    """mrjob is not installed."""


def _mrjob_job() -> Any:
    try:
        import mrjob.job
    except ImportError as error:
        if error.name in REMOVED_MODULES:  # mrjob is there, but imports a module this Python no longer has
            raise MRJobNotAvailable(
                f"mrjob imports {error.name}, which Python {sys.version_info.major}.{sys.version_info.minor} no "
                f"longer has: pip install {REMOVED_MODULES[error.name]} (or install hop with its mrjob extra: "
                "pip install -e '.[mrjob]')"
            ) from error
        raise MRJobNotAvailable(
            f"running mrjob jobs needs the mrjob package ({error}): pip install 'mrjob>=0.7.4' (or install hop "
            "with its mrjob extra: pip install -e '.[mrjob]')"
        ) from error
    return mrjob.job


def load_mrjob_file(path: str) -> type[Any]:
    """Import ``path`` as a module of its own (registered in ``sys.modules``, so ``hop.jobspec`` can pickle it by
    value), with the modules beside it importable as for a hop job (:func:`hop.loader.import_beside`), and return
    the one ``MRJob`` subclass it defines (of several deriving from one another, the one none derives from:
    :func:`hop.loader.most_derived`, as for a hop job)."""
    mrjob_job = _mrjob_job()
    file = Path(path)
    if not file.is_file():
        raise JobFileError(f"mrjob file {path} does not exist")
    name = f"hop_mrjob_{file.stem}_{hashlib.sha1(str(file.resolve()).encode()).hexdigest()[:8]}"
    spec = importlib.util.spec_from_file_location(name, file)
    if spec is None or spec.loader is None:
        raise JobFileError(f"mrjob file {path} is not a Python module")
    module = importlib.util.module_from_spec(spec)
    import_beside(path)  # (``from helpers import tokens`` works as under ``python mr_job.py``, and travels)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as error:
        del sys.modules[name]
        raise import_failed(f"mrjob file {path}", error) from error
    classes = [
        value
        for value in vars(module).values()
        if isinstance(value, type) and issubclass(value, mrjob_job.MRJob) and value.__module__ == name
    ]
    chosen = most_derived(classes)
    if chosen is None:
        found = ", ".join(c.__name__ for c in classes) or "none"
        raise JobFileError(
            f"mrjob file {path} must define exactly one MRJob subclass, or subclasses of one another (found: "
            f"{found}); without --mrjob, hop runs hop.Job files"
        )
    return chosen
