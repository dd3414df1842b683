"""The description of a submitted job, as it travels from the client to the coordinator and to tasks.

A :class:`JobSpec` is plain data (msgpack-able as a dict); the user's class travels as cloudpickle bytes in
``job_code`` and is only unpickled inside task processes. ``load_job`` turns it back into a :class:`hop.Job`.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib.abc
import importlib.machinery
import os
import sys
import types
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import cloudpickle

from hop.inputs import DEFAULT_SPLIT_BYTES
from hop.job import INPUT_FORMATS, Job

MODES = ("pipelined", "blocking")


@dataclass(frozen=True)
class JobSpec:
    """Everything the engine needs to run one step of a job."""

    job_code: bytes
    name: str
    inputs: tuple[str, ...]
    output: str
    num_reduces: int = 1
    mode: str = "pipelined"
    step: int = 0
    num_steps: int = 1
    input_format: str = "text"
    split_size: int = DEFAULT_SPLIT_BYTES
    spill_records: int = 2_000_000
    reduce_memory: int = 256 << 20
    overwrite: bool = False
    job_id: str = ""
    options: dict[str, Any] = field(default_factory=dict)
    """Further settings, all optional: ``max_attempts`` (4), ``skip_bad_records`` (0), ``speculative`` (False),
    ``unsent_threshold`` (2, flow control), ``max_line_bytes`` (256 MiB)."""

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {self.mode!r}")
        if self.num_reduces < 1:
            raise ValueError(f"a job needs at least one reducer, got {self.num_reduces}")
        if self.input_format not in (*INPUT_FORMATS, "output"):
            raise ValueError(f"input format must be one of {INPUT_FORMATS}, got {self.input_format!r}")
        if self.split_size <= 0 or self.spill_records <= 0 or self.reduce_memory <= 0:
            raise ValueError("split size, spill records and reduce memory must be positive")

    def to_wire(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["inputs"] = list(self.inputs)
        return data

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> JobSpec:
        data = dict(data)
        data["inputs"] = tuple(data["inputs"])
        return cls(**data)

    def with_id(self, job_id: str) -> JobSpec:
        return dataclasses.replace(self, job_id=job_id)


def dump_job_class(job_class: type[Job]) -> bytes:
    """Serialize a job class by value, so task processes need not import the user's file.

    The payload is ``(job_class, source file, sources beside)``: cloudpickle 3.1 and later replace the file name of
    code it pickles by value with ``<dynamic-code>``, and a user's traceback must name the user's file and show the
    failing line. The single-file modules beside the job file that it imports from (``from helper import tokens``)
    go by value too: a task process runs many jobs, so importing them by name there would need the job's directory
    on its path and would keep the first job's ``helper`` for every later one. An ``import`` inside a method runs
    only in the task process, where no module global shows it: the *sources beside* (:func:`_sources_beside`) are
    what such an import finds there (:func:`load_job_class` serves them to this job's tasks).
    """
    module = sys.modules[job_class.__module__]
    by_value = [module] if job_class.__module__ != "__main__" else []  # cloudpickle pickles __main__ by value
    by_value += _modules_beside(module)
    for item in by_value:
        cloudpickle.register_pickle_by_value(item)
    source = getattr(module, "__file__", None)
    try:
        return cloudpickle.dumps((job_class, source, _sources_beside(source) if source else {}))
    finally:
        for item in by_value:
            cloudpickle.unregister_pickle_by_value(item)


def _modules_beside(module: types.ModuleType) -> list[types.ModuleType]:
    """The modules ``module``'s globals come from (or are) that are single files in its own file's directory, and
    theirs in turn (a helper importing another helper): its helpers, not packages (a job file at a project's root
    must not take the project's packages along)."""
    source = getattr(module, "__file__", None)
    if not source:
        return []
    directory = os.path.dirname(os.path.realpath(source))
    found: list[types.ModuleType] = []
    pending = [module]
    while pending:
        names = {
            value.__name__ if isinstance(value, types.ModuleType) else getattr(value, "__module__", None)
            for value in vars(pending.pop()).values()
        }
        for name in sorted(n for n in names if isinstance(n, str)):
            other = sys.modules.get(name)
            file = getattr(other, "__file__", None)
            if other is None or other is module or other in found or not file or hasattr(other, "__path__"):
                continue
            if os.path.dirname(os.path.realpath(file)) == directory:
                found.append(other)
                pending.append(other)
    return found


def _sources_beside(source: str) -> dict[str, tuple[str, str]]:
    """``{module name: (file, text)}`` of the single-file modules beside ``source`` that an ``import`` statement
    anywhere in it (a method's included) names, and those their own imports name, as a plain ``python`` run of the
    job file would find them (its directory first on the path). Left out: standard library names and modules this
    process already imported from elsewhere, which a task process would not take from the job's directory either."""
    directory = os.path.dirname(os.path.realpath(source))
    found: dict[str, tuple[str, str]] = {}
    pending = [os.path.realpath(source)]
    while pending:
        for name in sorted(_imported_names(pending.pop())):
            file = os.path.join(directory, f"{name}.py")
            loaded = getattr(sys.modules.get(name), "__file__", None)
            if name in found or name in sys.stdlib_module_names or not os.path.isfile(file):
                continue
            if loaded is not None and os.path.realpath(loaded) != os.path.realpath(file):
                continue
            with open(file, encoding="utf-8") as handle:
                found[name] = (file, handle.read())
            pending.append(file)
    return found


def _imported_names(file: str) -> set[str]:
    """The top-level module names the absolute ``import`` statements of a Python file name (``import a.b`` and
    ``from a.b import c`` name ``a``); none if the file does not parse (its own import then reports it)."""
    try:
        with open(file, encoding="utf-8") as handle:
            tree = ast.parse(handle.read(), filename=file)
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return set()
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.partition(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.partition(".")[0])
    return names


class _BesideFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves the modules beside the job file of the job whose tasks this process runs now (one at a time), as
    the job file's directory would at the head of ``sys.path``. Switching to another job forgets the modules it
    loaded for the previous one, so each job gets its own ``helper``."""

    def __init__(self) -> None:
        self.sources: dict[str, tuple[str, str]] = {}
        self.loaded: dict[str, types.ModuleType] = {}

    def serve(self, sources: dict[str, tuple[str, str]]) -> None:
        if sources == self.sources:
            return
        for name, module in self.loaded.items():
            if sys.modules.get(name) is module:
                del sys.modules[name]
        self.sources, self.loaded = sources, {}

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if path is not None or name not in self.sources:  # (a submodule's import passes its package's path)
            return None
        spec = importlib.machinery.ModuleSpec(name, self, origin=self.sources[name][0])
        spec.has_location = True  # so the module gets __file__ and tracebacks name it
        return spec

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        return None

    def exec_module(self, module: types.ModuleType) -> None:
        file, text = self.sources[module.__name__]
        self.loaded[module.__name__] = module
        exec(compile(text, file, "exec"), module.__dict__)


_beside_finder = _BesideFinder()


@lru_cache(maxsize=16)
def _load(job_code: bytes) -> tuple[type[Job], dict[str, tuple[str, str]]]:
    job_class, source, beside = cloudpickle.loads(job_code)  # as dump_job_class wrote it
    if not (isinstance(job_class, type) and issubclass(job_class, Job)):
        raise TypeError(f"job code does not hold a hop.Job subclass but {job_class!r}")
    if source:
        restore_source_file(job_class, source)
    return job_class, beside


def load_job_class(job_code: bytes) -> type[Job]:
    """The job class ``job_code`` holds. From now on, an ``import`` of a module beside the job file (in a method)
    finds that job's module, until another job is loaded (a task process runs one task at a time)."""
    job_class, beside = _load(job_code)
    if _beside_finder not in sys.meta_path:
        sys.meta_path.insert(0, _beside_finder)  # the job's directory comes first, as for ``python job.py``
    _beside_finder.serve(beside)
    return job_class


_DYNAMIC_CODE = "<dynamic-code>"


def restore_source_file(job_class: type, source: str) -> None:
    """Give the code that cloudpickle rebuilt with the file name ``<dynamic-code>`` its file back: the job class's
    functions (methods, static and class methods, properties, base classes from the same file), the functions and
    classes their globals hold, and the code nested in them (inner functions, generator expressions)."""
    seen: set[int] = set()

    def visit(item: Any) -> None:
        if id(item) in seen:
            return
        seen.add(id(item))
        if isinstance(item, types.FunctionType):
            if item.__code__.co_filename == _DYNAMIC_CODE:
                item.__code__ = _with_file(item.__code__, source)
                for value in list(item.__globals__.values()):  # helpers and classes defined beside the job
                    visit(value)
        elif isinstance(item, staticmethod | classmethod):
            visit(item.__func__)
        elif isinstance(item, property):
            for function in (item.fget, item.fset, item.fdel):
                visit(function)
        elif isinstance(item, type):
            for klass in item.__mro__:
                for value in list(vars(klass).values()):
                    visit(value)

    visit(job_class)


def _with_file(code: types.CodeType, source: str) -> types.CodeType:
    consts = tuple(
        _with_file(const, source) if isinstance(const, types.CodeType) else const for const in code.co_consts
    )
    filename = source if code.co_filename == _DYNAMIC_CODE else code.co_filename
    return code.replace(co_filename=filename, co_consts=consts)
