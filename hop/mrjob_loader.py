"""Loading an mrjob job file: import it and find its one ``MRJob`` subclass. mrjob itself is imported only here,
and only when a job needs it (it is an optional dependency of hop)."""

from __future__ import annotations

import ast
import hashlib
import importlib.machinery
import importlib.util
import os
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


def load_mrjob_file(path: str, job_class: str | None = None) -> type[Any]:
    """Import ``path`` as a module of its own (registered in ``sys.modules``, so ``hop.jobspec`` can pickle it by
    value), with the modules beside it importable as for a hop job (:func:`hop.loader.import_beside`), and return
    its ``MRJob`` subclass named ``job_class`` (``--job-class``) if given; else, as mrjob, the one its
    ``if __name__ == "__main__":`` block runs (:func:`_main_class_name`); else its one, or of several deriving from
    one another the one none derives from (:func:`hop.loader.most_derived`, as for a hop job). The class named
    either way may be one the file imports (``from mr_base import MRBase``): a file running an imported job was
    refused as defining none."""
    mrjob_job = _mrjob_job()
    file = Path(path)
    if not file.is_file():
        raise JobFileError(f"mrjob file {path} does not exist")
    name = f"hop_mrjob_{file.stem}_{hashlib.sha1(str(file.resolve()).encode()).hexdigest()[:8]}"
    # Read as Python source whatever its name ends with, as `python mr_job` runs a job file named without .py (the
    # default finder takes only .py files, and refused it as no Python module).
    # (An absolute path, as the default gives it: the job's tracebacks name the file so.)
    location = os.path.abspath(path)
    spec = importlib.util.spec_from_file_location(
        name, location, loader=importlib.machinery.SourceFileLoader(name, location)
    )
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
    found = ", ".join(c.__name__ for c in classes) or "none"

    def imported(class_name: str | None) -> type[Any] | None:
        """The MRJob subclass the file imported under that name (``from mr_base import MRBase``), or None."""
        value = vars(module).get(class_name) if class_name else None
        return value if isinstance(value, type) and issubclass(value, mrjob_job.MRJob) else None

    if job_class is not None:  # (it was ignored: the file's __main__ class ran whatever it named)
        named = next((c for c in classes if c.__name__ == job_class), None) or imported(job_class)
        if named is None:
            raise JobFileError(f"mrjob file {path} defines no MRJob subclass {job_class} (it defines: {found})")
        return named
    run = _main_class_name(file)
    chosen = next((c for c in classes if c.__name__ == run), None) or imported(run) or most_derived(classes)
    if chosen is None:
        remedy = (
            "run one in its if __name__ == '__main__': block (MRJobClass.run()), or name it with --job-class"
            if classes
            else "define one"
        )
        raise JobFileError(
            f"mrjob file {path} must define exactly one MRJob subclass, or subclasses of one another (found: "
            f"{found}): {remedy}; without --mrjob, hop runs hop.Job files"
        )
    return chosen


def _main_class_name(file: Path) -> str | None:
    """The name of the class whose ``run()`` the file's ``if __name__ == "__main__":`` block calls
    (``MRWordCount.run()``), the job mrjob runs for ``python mr_job.py``, or None."""
    try:
        tree = ast.parse(file.read_bytes(), str(file))
    except (SyntaxError, ValueError):
        return None  # (the file imported: a source ast cannot read is not worth failing on here)
    for node in tree.body:
        if not (isinstance(node, ast.If) and _is_main_test(node.test)):
            continue
        for call in ast.walk(node):
            if (
                isinstance(call, ast.Call)
                and isinstance(call.func, ast.Attribute)
                and call.func.attr == "run"
                and isinstance(call.func.value, ast.Name)
            ):
                return call.func.value.id
    return None


def _is_main_test(test: ast.expr) -> bool:
    """Whether ``test`` is ``__name__ == "__main__"`` (either way round)."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq)):
        return False
    sides = [test.left, test.comparators[0]]
    names = {side.id for side in sides if isinstance(side, ast.Name)}
    texts = {side.value for side in sides if isinstance(side, ast.Constant)}
    return names == {"__name__"} and texts == {"__main__"}
