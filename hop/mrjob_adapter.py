"""Running an unmodified mrjob ``MRJob`` on hop: the job's steps become hop steps.

What is supported (mrjob's own semantics, see its documentation):

- ``mapper``/``combiner``/``reducer`` and ``steps()`` with ``MRStep``; ``mapper_init``/``mapper_final`` and
  ``reducer_init``/``reducer_final`` (hop runs them once per task attempt, as mrjob does per task). A combiner with
  ``combiner_init``/``combiner_final`` is not run (mrjob allows any combiner to be skipped; the result is the same).
- Protocols: the job's ``INPUT_PROTOCOL`` reads each input line (default ``RawValueProtocol``: key ``None``, the line
  as value), values travel between steps as hop keys and values (JSON-compatible, as mrjob's default internal
  protocol requires), and the output is written with the job's ``OUTPUT_PROTOCOL`` (default ``JSONProtocol``), so
  ``part-*`` lines are what mrjob writes.
- ``increment_counter`` adds to hop's user counters (in ``_job.json``); ``set_status`` is printed to the task's
  standard error as mrjob prints it; ``SORT_VALUES`` sorts each key's values.
- Options the job defines with ``configure_args`` (``add_passthru_arg``, ``add_file_arg``) are given after ``--``:
  ``hop run --mrjob job.py IN -o OUT -- --my-option 3``; ``FILES`` are found beside the job file and, as under
  mrjob, are in the working directory of every task while it runs.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from hop.job import Job, Step
from hop.loader import JobFileError

__all__ = ["MRJobNotAvailable", "adapt", "load_mrjob_file", "rewrite_output"]


_UNSUPPORTED = (
    "mapper_cmd",
    "mapper_pre_filter",
    "mapper_raw",
    "combiner_cmd",
    "combiner_pre_filter",
    "reducer_cmd",
    "reducer_pre_filter",
)


class MRJobNotAvailable(JobFileError):
    """mrjob is not installed."""


def _mrjob() -> Any:
    try:
        import mrjob.job
    except ImportError as error:
        raise MRJobNotAvailable("running mrjob jobs needs the mrjob package: pip install mrjob") from error
    return mrjob.job


def load_mrjob_file(path: str) -> type[Any]:
    """Import ``path`` and return the one ``MRJob`` subclass it defines."""
    mrjob_job = _mrjob()
    file = Path(path)
    if not file.is_file():
        raise JobFileError(f"mrjob file {path} does not exist")
    name = f"hop_mrjob_{file.stem}_{hashlib.sha1(str(file.resolve()).encode()).hexdigest()[:8]}"
    spec = importlib.util.spec_from_file_location(name, file)
    if spec is None or spec.loader is None:
        raise JobFileError(f"mrjob file {path} is not a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as error:
        del sys.modules[name]
        raise JobFileError(f"mrjob file {path} failed to import: {type(error).__name__}: {error}") from error
    classes = [
        value
        for value in vars(module).values()
        if isinstance(value, type) and issubclass(value, mrjob_job.MRJob) and value.__module__ == name
    ]
    if len(classes) != 1:
        found = ", ".join(c.__name__ for c in classes) or "none"
        raise JobFileError(f"mrjob file {path} must define exactly one MRJob subclass (found: {found})")
    return classes[0]


def adapt(mrjob_class: type[Any], job_args: list[str], job_file: str) -> type[Job]:
    """A hop job class running ``mrjob_class`` with the passthrough arguments ``job_args``."""
    mrjob_class(args=list(job_args))  # options are checked here, on the submitting machine
    folder = Path(job_file).resolve().parent
    files = [str(folder / name) for name in getattr(mrjob_class, "FILES", None) or []]
    missing = [path for path in files if not os.path.exists(path)]
    if missing:
        raise JobFileError(f"{job_file}: FILES not found beside the job: {', '.join(missing)}")
    attributes = {
        "__module__": mrjob_class.__module__,  # pickled by value with the user's module (hop.jobspec)
        "__qualname__": mrjob_class.__name__,
        "mrjob_class": mrjob_class,
        "mrjob_args": list(job_args),
        "mrjob_files": files,
    }
    return type(mrjob_class.__name__, (MRJobAdapter,), attributes)


class MRJobAdapter(Job):
    """The hop side of an mrjob job (see the module docstring); :func:`adapt` makes one per job."""

    mrjob_class: Any = None
    mrjob_args: list[str] = []
    mrjob_files: list[str] = []

    def __init__(self) -> None:
        super().__init__()
        self.mr = self.mrjob_class(args=list(self.mrjob_args))
        # Counters and status go to hop instead of Hadoop streaming's stderr protocol.
        self.mr.increment_counter = lambda group, counter, amount=1: self.increment_counter(group, counter, amount)
        self.mr.set_status = lambda message: print(f"reporter:status:{message}", file=sys.stderr, flush=True)
        self._workdir: str | None = None
        self._previous_cwd: str | None = None

    def setup(self) -> None:
        if self.mrjob_files:  # the job opens its FILES by name, from its working directory
            self._workdir = tempfile.mkdtemp(prefix="hop-mrjob-")
            for path in self.mrjob_files:
                os.symlink(path, os.path.join(self._workdir, os.path.basename(path)))
            self._previous_cwd = os.getcwd()
            os.chdir(self._workdir)

    def teardown(self) -> None:
        if self._previous_cwd is not None:
            os.chdir(self._previous_cwd)
        if self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)

    def steps(self) -> list[Step] | None:
        mr = self.mr
        steps = []
        for number, mr_step in enumerate(mr.steps()):
            description = mr_step.description(number)
            if description.get("type", "streaming") != "streaming":
                raise JobFileError(
                    f"{type(mr).__name__} step {number} is a {description['type']} step; hop runs "
                    "streaming (mapper/combiner/reducer) steps"
                )
            unsupported = [name for name in _UNSUPPORTED if mr_step[name] is not None]
            if unsupported:
                raise JobFileError(
                    f"{type(mr).__name__} step {number} uses {', '.join(unsupported)}; hop runs Python mappers, "
                    "combiners and reducers (not commands, pre-filters or raw mappers)"
                )
            mapper, combiner, reducer = mr_step["mapper"], mr_step["combiner"], mr_step["reducer"]
            if combiner is not None and (mr_step["combiner_init"] or mr_step["combiner_final"]):
                combiner = None
            steps.append(
                Step(
                    mapper=self._mapper(mapper, first=number == 0),
                    combiner=_group(combiner, False) if combiner is not None else None,
                    reducer=_group(reducer, bool(getattr(mr, "SORT_VALUES", False))) if reducer is not None else None,
                    mapper_init=_hook(mr_step, "mapper_init"),
                    mapper_final=_hook(mr_step, "mapper_final"),
                    reducer_init=_hook(mr_step, "reducer_init"),
                    reducer_final=_hook(mr_step, "reducer_final"),
                )
            )
        return steps

    def _mapper(self, function: Callable[..., Any] | None, first: bool) -> Callable[[Any, Any], Iterable[Any]] | None:
        if not first:
            return function
        protocol = self.mr.input_protocol()
        if type(protocol).__name__ == "RawValueProtocol" and function is not None:
            # mrjob's default input: key None, the line as value; the mapper's pairs go to the buffer as they are.
            return lambda offset, line: function(None, line)
        read = protocol.read

        def mapper(offset: Any, line: str) -> Iterator[tuple[Any, Any]]:
            key, value = read(line.encode("utf-8"))
            if function is None:
                yield key, value
            else:
                yield from _pairs(function(key, value))

        return mapper


def _pairs(output: Iterable[Any] | None) -> Iterator[tuple[Any, Any]]:
    for pair in output or ():
        key, value = pair
        yield key, value


def _group(function: Callable[..., Any], sort_values: bool) -> Callable[[Any, Iterable[Any]], Iterator[Any]]:
    def group(key: Any, values: Iterable[Any]) -> Iterator[tuple[Any, Any]]:
        if sort_values:
            values = sorted(values)
        yield from _pairs(function(key, iter(values)))

    return group


def _hook(mr_step: Any, name: str) -> Callable[[], Iterable[Any]] | None:
    function = mr_step[name]
    if function is None:
        return None
    return lambda: list(_pairs(function()))


def rewrite_output(output: str, mrjob_class: type[Any], job_args: list[str]) -> None:
    """Rewrite hop's ``part-*`` files (``json(key) TAB json(value)``) with the job's ``OUTPUT_PROTOCOL``."""
    from hop.inputs import Split, iter_records

    write = mrjob_class(args=list(job_args)).output_protocol().write
    for part in sorted(Path(output).glob("part-*")):
        temporary = part.with_name(f".{part.name}.mrjob")
        with open(temporary, "wb") as file:
            for key, value in iter_records(Split(str(part), 0, part.stat().st_size), "output"):
                file.write(write(_lists(key), _lists(value)) + b"\n")
        os.replace(temporary, part)


def _lists(value: Any) -> Any:
    """hop reads JSON arrays back as tuples; mrjob's protocols see lists, as from JSON."""
    if isinstance(value, tuple):
        return [_lists(item) for item in value]
    return value
