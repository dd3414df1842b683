"""Loading a job file: import a Python file and find its ``hop.Job`` subclass."""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import sys
import traceback
from pathlib import Path
from typing import TypeVar

from hop.aggregates import Aggregate
from hop.job import HOOKS, INPUT_FORMATS, Job, JobDefinitionError
from hop.jobspec import BesideSourcesError, shadowed_beside, sources_beside
from hop.usertrace import has_user_frame, user_traceback


class JobFileError(ValueError):
    """The job file cannot be loaded or does not define exactly one job class. ``user_traceback``: when the file
    failed to import, the user's traceback (from the job file's frame on), which says where; otherwise None."""

    def __init__(self, message: str, user_traceback: str | None = None) -> None:
        super().__init__(message)
        self.user_traceback = user_traceback


def import_failed(what: str, error: Exception) -> JobFileError:
    """The :class:`JobFileError` for a job file (``what`` names it) whose import raised ``error``: the message names
    the error, the traceback where it was raised (a helper module's line, a syntax error's caret)."""
    # A syntax error has no frame of the user's (its file and line are the error's own): it is shown alone.
    shown = user_traceback(error) if has_user_frame(error) else "".join(traceback.format_exception_only(error))
    return JobFileError(f"{what} failed to import: {type(error).__name__}: {error}", shown)


def load_job_file(path: str, class_name: str | None = None, *, of_several: bool = False) -> type[Job]:
    """Import ``path`` as a module and return its Job subclass (``class_name`` picks one if it defines several).

    ``of_several``: ``path`` is one of a pipeline's job files, where ``--job-class`` picks the class of that name in
    each file defining one: a file defining no class of that name runs its own job, as without ``class_name``
    (the caller checks that some file did define it). It named the first file's class alone, so a later file
    defining several jobs could not be run at all, though its error said to pick one with ``--job-class``."""
    file = Path(path)
    if not file.exists():
        raise JobFileError(f"job file {path} does not exist")
    if not file.is_file() or file.suffix != ".py":
        raise JobFileError(f"job file {path} is not a Python file (.py): give the path of the file defining the job")
    digest = hashlib.sha1(str(file.resolve()).encode()).hexdigest()[:8]
    module_name = f"hop_job_{file.stem}_{digest}"
    spec = importlib.util.spec_from_file_location(module_name, file)
    if spec is None or spec.loader is None:
        raise JobFileError(f"job file {path} is not a Python module")
    module = importlib.util.module_from_spec(spec)
    import_beside(path)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as error:
        del sys.modules[module_name]
        raise import_failed(f"job file {path}", error) from error
    defined = [
        value
        for value in vars(module).values()
        if isinstance(value, type) and issubclass(value, Job) and value is not Job and value.__module__ == module_name
    ]
    names = ", ".join(cls.__name__ for cls in defined) or "none"
    chosen = [cls for cls in defined if cls.__name__ == class_name]
    if class_name is not None and not chosen and not of_several:
        raise JobFileError(f"job file {path} defines no hop.Job subclass {class_name} (it defines: {names})")
    if not chosen:
        chosen = [cls for cls in [most_derived(defined)] if cls is not None]
        if not chosen:
            remedy = "pick one with --job-class" if defined else "define a subclass of hop.Job in it"
            if defined and of_several:
                remedy = (
                    f"--job-class {class_name} names none of them: pick one"
                    if class_name is not None
                    else "pick one with --job-class"
                ) + " (in a pipeline it picks the class of that name in each job file that defines one)"
            mrjobs = [value.__name__ for value in vars(module).values() if _is_mrjob_class(value, module_name)]
            if not defined and mrjobs:  # (--mrjob takes it, on hop's engine only)
                remedy = f"it defines the mrjob job {', '.join(mrjobs)}: run it with hop run --mrjob"
            elif not defined and (plain := _job_like_classes(module, module_name)):
                # (a class with a map but no base: told only to "define a subclass of hop.Job", a user looked for
                # what else was missing)
                remedy = (
                    f"{plain[0]} has a map but is not a hop.Job: declare it class {plain[0]}(Job), with "
                    "`from hop import Job`"
                )
            raise JobFileError(
                f"job file {path} must define exactly one hop.Job subclass, or subclasses of one another (found: "
                f"{names}); {remedy}"
            )
    _check_definition(path, chosen[0])
    return chosen[0]


def _job_like_classes(module: object, module_name: str) -> list[str]:
    """The classes the module ``module_name`` defines with a ``map`` or ``reduce`` of their own that derive from
    no ``hop.Job``: a job written without its base class."""
    return [
        value.__name__
        for value in vars(module).values()
        if isinstance(value, type)
        and value.__module__ == module_name
        and any(callable(vars(value).get(name)) for name in ("map", "reduce"))
    ]


def _is_mrjob_class(value: object, module_name: str) -> bool:
    """Whether ``value`` is a class of the module ``module_name`` deriving from mrjob's ``MRJob`` (told by name, so
    that a hop job file loads without mrjob installed)."""
    if not isinstance(value, type) or value.__module__ != module_name:
        return False
    return any(base.__name__ == "MRJob" and base.__module__ == "mrjob.job" for base in value.__mro__)


_Class = TypeVar("_Class", bound=type)


def most_derived(classes: list[_Class]) -> _Class | None:
    """The one class of ``classes`` that no other of them derives from, or None when there is none or several.

    A file defining a base job (shared helpers) and a job deriving from it runs the latter: the others are all its
    bases, since following subclasses from any of them ends at a class no other derives from, and there is one.
    Two unrelated jobs, or two subclasses of one base, stay for the user to pick."""
    leaves = [cls for cls in classes if not any(other is not cls and issubclass(other, cls) for other in classes)]
    return leaves[0] if len(leaves) == 1 else None


def import_beside(path: str) -> None:
    """Make the modules beside the job file ``path`` (a hop job's or an mrjob job's) importable by it, as for a
    script run with ``python`` (task processes get the ones it imports, at the top or in a method:
    ``hop.jobspec.dump_job_class``), after refusing those that cannot travel with it (:class:`JobFileError`)."""
    file = Path(path)
    directory = str(file.resolve().parent)
    if directory not in sys.path:
        sys.path.insert(0, directory)
    _check_beside(path, str(file))


def _check_beside(path: str, file: str) -> None:
    """Refuse, before the job file runs, the modules beside it that cannot travel with the job to its tasks: one
    named like a module this process has already imported from elsewhere (``json.py``: the job would get the
    standard library's here and its own under ``python``, and fail in a way that names neither), or too many."""
    shadowed = shadowed_beside(file)
    if shadowed:
        name, beside, loaded = shadowed[0]
        raise JobFileError(
            f"job file {path} imports {name}, and {beside} is beside it, but this hop process has already imported "
            f"the module {name} (from {loaded}) and cannot give the job the one beside it: rename {beside} (and the "
            f"imports of it)"
        )
    try:
        sources_beside(file)
    except BesideSourcesError as error:
        raise JobFileError(f"job file {path}: {error}") from None


def _check_definition(path: str, job_class: type[Job]) -> None:
    """Refuse a job the engine cannot run (an input format it does not read, steps that are not steps, an aggregate
    reduce with another combine, no steps) before any task starts, as a usage error naming the file."""
    if job_class.input_format not in INPUT_FORMATS:
        raise JobFileError(
            f"job file {path}: {job_class.__name__}.input_format is {job_class.input_format!r}; hop reads "
            f"{', '.join(INPUT_FORMATS)}"
        )
    call = f"{job_class.__name__}()"  # (what raised, for the message)
    try:
        job = job_class()
        call += ".steps()"
        steps = job.resolved_steps()
    except JobDefinitionError as error:
        raise JobFileError(f"job file {path}: {error}") from error
    except Exception as error:  # the user's own __init__ or steps(): hop run crashed with the loader's traceback
        message = f"job file {path}: {call} raised {type(error).__name__}: {error}"
        raise JobFileError(message, user_traceback(error)) from error
    for number, step in enumerate(steps, 1):  # (from 1, as hop run numbers steps)
        where = f"step {number}'s " if len(steps) > 1 else ""
        for field, (name, arguments) in _ARGUMENTS.items():
            _check_arguments(path, where + name, getattr(step, field), arguments)
    _check_arguments(path, "partition", job.partition, ("key", "num_partitions"))


_ARGUMENTS: dict[str, tuple[str, tuple[str, ...]]] = {
    "mapper": ("map", ("key", "value")),
    "combiner": ("combine", ("key", "values")),
    "reducer": ("reduce", ("key", "values")),
    **{hook: (hook, ()) for hook in HOOKS},
}
"""A step's functions: the name a user gives them and the arguments the engine passes (after ``self``)."""


def _check_arguments(path: str, name: str, function: object, arguments: tuple[str, ...]) -> None:
    """Refuse a function that cannot take the arguments the engine passes (``def map(self, line)``): every task
    would fail on its first record with Python's "takes 2 positional arguments but 3 were given"."""
    if function is None or isinstance(function, Aggregate):
        return
    if isinstance(function, type) and issubclass(function, Aggregate):
        # ``reduce = Sum`` (the class): its signature is the constructor's, so the message below would ask for
        # a ``reduce(self, key, values)`` method the user never meant to write.
        short = name.rpartition(" ")[2]
        instance = "TopK(10)" if function.__name__ == "TopK" else f"{function.__name__}()"
        raise JobFileError(
            f"job file {path}: {name} is the aggregate class {function.__name__}, not an aggregate: write "
            f"{short} = {instance}, with the parentheses"
        )
    try:
        signature = inspect.signature(function)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return  # (a callable without a signature Python can read: let it run)
    try:
        signature.bind(*arguments)
    except TypeError as error:
        expected = ", ".join(("self", *arguments))
        raise JobFileError(
            f"job file {path}: {name}{signature} cannot take ({', '.join(arguments)}) ({error}); the engine calls "
            f"it so: define it as {name.rpartition(' ')[2]}({expected})"
        ) from None
