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
import pickle
import sys
import types
from collections.abc import Iterator
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
    """Further settings, all optional: ``max_attempts`` (4), ``task_timeout`` (none: seconds a batch job's running
    attempt may go without advancing before it fails, ``hop.scheduler.JobState.time_out_stalled``),
    ``skip_bad_records`` (0), ``speculative`` (False),
    ``tail_split`` (True: ``hop.scheduler``), ``unsent_threshold`` (2, flow control), ``max_line_bytes`` (256 MiB),
    ``step_reduces`` (a multi-step job's reducers per step, ``None`` for ``num_reduces``: :meth:`step_num_reduces`),
    ``step_task_timeouts`` (an mrjob job's ``mapreduce.task.timeout`` per step, in seconds, ``None`` for none;
    ``task_timeout`` wins),
    ``success_by_client`` (False: the submitting client writes the last step's ``_SUCCESS`` once it has rewritten
    the output, as for an mrjob job, ``hop.mrjob_adapter.rewrite_output``), ``run_output`` (the output directory of
    the run whose first job this is, when the job writes elsewhere: a multi-step run's first step; refused and, with
    ``overwrite``, cleared with the job's own once the coordinator accepts the job, ``hop.runner._claiming``),
    ``whole_files`` (False: the first step's maps read each input file whole, as one record ``(0, path)``,
    :attr:`reads_whole_files`)."""

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {self.mode!r}")
        if self.num_reduces < 1:
            raise ValueError(f"a job needs at least one reducer, got {self.num_reduces}")
        if self.input_format not in INPUT_FORMATS:
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

    def step_num_reduces(self, step: int) -> int:
        """The reducers of step ``step`` of this job: what ``options["step_reduces"]`` gives for it (an mrjob job's
        jobconf), else :attr:`num_reduces`. Contract for whoever makes a step's spec from the job's (the runner)."""
        given = self.options.get("step_reduces") or ()
        return int(given[step] or self.num_reduces) if step < len(given) else self.num_reduces

    @property
    def reads_whole_files(self) -> bool:
        """Whether this step's maps read each input file whole, as one record ``(0, path)`` without reading it
        (an mrjob ``mapper_raw``, which opens the file itself): the first step's, with ``options["whole_files"]``."""
        return bool(self.options.get("whole_files")) and self.step == 0

    def with_id(self, job_id: str) -> JobSpec:
        return dataclasses.replace(self, job_id=job_id)


def dump_job_class(job_class: type[Job]) -> bytes:
    """Serialize a job class by value, so task processes need not import the user's file.

    The payload is ``(source file, sources beside, pickled class)``: cloudpickle 3.1 and later replace the file name
    of code it pickles by value with ``<dynamic-code>``, and a user's traceback must name the user's file and show
    the failing line. The modules and packages beside the job file that it imports (``from helper import tokens``,
    ``import helper`` in a method, ``from mylib.parse import fields``) travel as their sources
    (:func:`sources_beside`), and the class refers to them by name: a task process serves those sources to the
    imports of this job's code (:func:`load_job_class`) before it unpickles the class, so a helper imported at the
    top of the job file and again in a method is one module there, as under ``python``. Importing them from the job's
    directory instead would need that directory on the task process's path and would keep the first job's
    ``helper`` for every later job (a task process runs many jobs).

    Raises :class:`BesideSourcesError` if those sources are too large to travel with every task.
    """
    module = sys.modules[job_class.__module__]
    source = getattr(module, "__file__", None)
    beside = sources_beside(source) if source else {}
    by_value = job_class.__module__ != "__main__"  # cloudpickle pickles __main__ by value
    if by_value:
        cloudpickle.register_pickle_by_value(module)
    try:
        class_code = cloudpickle.dumps(job_class)
    finally:
        if by_value:
            cloudpickle.unregister_pickle_by_value(module)
    return pickle.dumps((source, beside, class_code))


MAX_BESIDE_BYTES = 8 << 20
"""The most Python source the modules and packages beside a job file may hold together: it travels with the job to
every task (a project's whole tree beside a job file is a mistake to report, not to copy)."""

ENGINE_PACKAGES = frozenset({"hop", "shuffle", "monitoring"})
"""The engine's own packages: never taken from beside a job file (a job at the root of hop's source tree imports
the engine task processes run, not a copy of it)."""


class BesideSourcesError(ValueError):
    """The modules beside a job file are too large to travel with it to every task."""


def sources_beside(source: str) -> dict[str, tuple[str, str | None]]:
    """``{module name: (file, text)}`` of the modules beside ``source`` that an ``import`` statement anywhere in
    it (a method's included) names, and those their own imports name, as a plain ``python`` run of the job file
    would find them (its directory first on the path): single files (``helper.py``) and packages (``mylib/``, every
    ``.py`` file of it and of its subpackages, so that its relative imports find theirs). A directory without
    ``__init__.py`` (a namespace package, ``mylib/`` or ``mylib/extra/``) travels only as far as the imports name
    it: as ``(directory, None)``, with the modules of it that they import (``from mylib.parse import f``:
    ``mylib/parse.py``) and, in turn, what those import (relative imports included); a directory beside the job
    file that its imports do not name (data) does not travel, nor one that ``python`` would not import because a
    module of that name is found elsewhere on the path (a ``json/`` of data files). A name of the standard
    library is taken from beside the file too, as ``python`` takes it, unless it is built into the interpreter or
    frozen (``python`` takes those from the interpreter). Left out: modules this process already imported from
    elsewhere (the job's code uses those here; :func:`shadowed_beside` lists them), the engine's packages, and
    packages Python finds without the job's directory (installed in development mode), which tasks import by name.

    Raises :class:`BesideSourcesError` past :data:`MAX_BESIDE_BYTES`."""
    found: dict[str, tuple[str, str | None]] = {}
    size = 0
    directory = os.path.dirname(os.path.realpath(source))
    for name, files in _modules_beside(source):
        if _loaded_elsewhere(name, files[name]) or _installed_as(name, files[name], directory):
            continue
        for dotted, file in files.items():
            if os.path.isdir(file):  # a namespace package: its modules are entries of their own
                found[dotted] = (file, None)
                continue
            with open(file, encoding="utf-8") as handle:
                text = handle.read()
            found[dotted] = (file, text)
            size += len(text)
        if size > MAX_BESIDE_BYTES:
            raise BesideSourcesError(
                f"the modules beside {source} that it imports hold more than {MAX_BESIDE_BYTES:,} bytes of Python "
                f"source ({size:,} with {name}), too much to send with every task: install "
                f"the larger packages where the workers run (pip install -e), so that their tasks import them by name"
            )
    return found


def shadowed_beside(source: str) -> list[tuple[str, str, str]]:
    """``(name, file beside, file loaded)`` of the modules beside ``source`` that its imports name but that this
    process already imported from elsewhere (``json.py`` beside a job file, when the engine has loaded the standard
    library's ``json``): the job's code gets the loaded one here, not the file beside it as under ``python``."""
    return [
        (name, files[name], str(getattr(sys.modules[name], "__file__", None) or name))
        for name, files in _modules_beside(source, follow_shadowed=True)
        if _loaded_elsewhere(name, files[name])
    ]


def _modules_beside(source: str, follow_shadowed: bool = False) -> Iterator[tuple[str, dict[str, str]]]:
    """``(name, {module name: file or namespace directory})`` for each top-level module beside ``source`` that its
    imports name, and their imports in turn (not those of a module loaded from elsewhere unless
    ``follow_shadowed``), in the order found."""
    directory = os.path.dirname(os.path.realpath(source))
    tops: dict[str, dict[str, str]] = {}
    followed: set[str] = set()
    pending: list[tuple[str, str | None]] = [(os.path.realpath(source), None)]
    while pending:
        file, package = pending.pop()
        for dotted in sorted(_imported_modules(file, package)):
            name = dotted.partition(".")[0]
            if name not in tops:
                tops[name] = {}
                if name in ENGINE_PACKAGES or _from_interpreter(name):
                    continue
                tops[name] = _module_files(directory, name)
            files = tops[name]
            if not files:
                continue
            if os.path.isdir(files[name]):  # a namespace package: only what the imports name
                files.update(_namespace_modules(directory, dotted))
            if follow_shadowed or not _loaded_elsewhere(name, files[name]):
                for module, path in files.items():
                    if module not in followed and not os.path.isdir(path):
                        followed.add(module)
                        pending.append((path, module if path.endswith("__init__.py") else module.rpartition(".")[0]))
    yield from ((name, files) for name, files in tops.items() if files)


def _from_interpreter(name: str) -> bool:
    """Whether ``python`` takes module ``name`` from the interpreter whatever lies beside the script."""
    return name in sys.builtin_module_names or importlib.machinery.FrozenImporter.find_spec(name) is not None


def _installed_as(name: str, file: str, directory: str) -> bool:
    """Whether Python finds module ``name`` at ``file`` (a namespace package's directory included) without the
    job's ``directory`` on its path (a package installed in development mode beside the job file): a task process
    imports it by name then, as the engine's own packages, so it need not travel (nor count against
    :data:`MAX_BESIDE_BYTES`)."""
    spec = _spec_elsewhere(name, directory)
    if spec is None:
        return False
    if spec.origin is None:  # a namespace package found there: does it hold this directory?
        where = {os.path.realpath(entry) for entry in spec.submodule_search_locations or ()}
        return os.path.realpath(file) in where
    return os.path.realpath(spec.origin) == os.path.realpath(file)


def _regular_elsewhere(name: str, directory: str) -> bool:
    """Whether ``python`` imports ``name`` as a module or regular package found elsewhere than in the job's
    ``directory`` (then a directory ``name`` without ``__init__.py`` beside the job file is no package of it)."""
    loaded = sys.modules.get(name)
    if loaded is not None:
        return getattr(loaded, "__file__", None) is not None or not hasattr(loaded, "__path__")
    spec = _spec_elsewhere(name, directory)
    return spec is not None and spec.origin is not None


def _spec_elsewhere(name: str, directory: str) -> importlib.machinery.ModuleSpec | None:
    """The spec of top-level module ``name`` as Python finds it without the job's ``directory`` on its path."""
    path = [entry for entry in sys.path if os.path.realpath(entry or os.curdir) != directory]
    for finder in sys.meta_path:
        if finder is _beside_finder:
            continue
        try:
            if finder is importlib.machinery.PathFinder:
                spec = importlib.machinery.PathFinder.find_spec(name, path)
            else:
                spec = finder.find_spec(name, None)
        except (ImportError, ValueError, AttributeError, TypeError):
            continue
        if spec is not None:
            return spec
    return None


def _loaded_elsewhere(name: str, file: str) -> bool:
    loaded = sys.modules.get(name)
    if loaded is None:
        return False
    origin = getattr(loaded, "__file__", None)
    if origin is None and os.path.isdir(file):  # a namespace package: loaded from this directory?
        where = {os.path.realpath(entry) for entry in getattr(loaded, "__path__", ())}
        return os.path.realpath(file) not in where
    return origin is None or os.path.realpath(origin) != os.path.realpath(file)


def _module_files(directory: str, name: str) -> dict[str, str]:
    """``{module name: file}`` of the module ``name`` in ``directory``, as Python's path finder picks it (a package
    ``name/__init__.py`` before ``name.py``): a package's every module, its subpackages' included (directories with
    an ``__init__.py``); nothing if there is neither."""
    package = os.path.join(directory, name)
    if os.path.isfile(os.path.join(package, "__init__.py")):
        return _package_files(package, name)
    single = os.path.join(directory, f"{name}.py")
    if os.path.isfile(single):
        return {name: single}
    # A directory without __init__.py is a namespace package, unless a module of that name is found elsewhere on
    # the path (python's path finder takes the first regular module or package over namespace portions).
    if os.path.isdir(package) and not _regular_elsewhere(name, directory):
        return {name: package}
    return {}


def _namespace_modules(directory: str, dotted: str) -> dict[str, str]:
    """``{module name: file or namespace directory}`` of what importing ``dotted`` (``mylib.parse.f``: a module,
    or a name in one) takes from beside the job file, through a namespace package: each namespace directory on
    the way, and the module file (or the whole regular package) where the way ends."""
    files: dict[str, str] = {}
    folder = directory
    parts = dotted.split(".")
    for number, part in enumerate(parts):
        name = ".".join(parts[: number + 1])
        package = os.path.join(folder, part)
        if os.path.isfile(os.path.join(package, "__init__.py")):
            files.update(_package_files(package, name))
            break
        if os.path.isfile(package + ".py"):
            files[name] = package + ".py"
            break
        if not (part.isidentifier() and os.path.isdir(package)):
            break  # (a name the module defines, or nothing: the import reports it)
        files[name] = package
        folder = package
    return files


def _package_files(package: str, name: str) -> dict[str, str]:
    """``{module name: file}`` of every module of the regular package ``name`` in directory ``package``, its
    subpackages' (directories with an ``__init__.py``) included."""
    files: dict[str, str] = {}
    for folder, subfolders, names in os.walk(package):
        subfolders[:] = sorted(d for d in subfolders if os.path.isfile(os.path.join(folder, d, "__init__.py")))
        relative = os.path.relpath(folder, package)
        prefix = name if relative == os.curdir else ".".join([name, *relative.split(os.sep)])
        for file in sorted(names):
            stem, _, suffix = file.partition(".")
            if suffix == "py" and stem.isidentifier():
                files[prefix if stem == "__init__" else f"{prefix}.{stem}"] = os.path.join(folder, file)
    return files


def _imported_modules(file: str, package: str | None) -> set[str]:
    """The modules the ``import`` statements of a Python file name, as dotted names (``import a.b`` names ``a.b``;
    ``from a.b import c`` names ``a.b`` and ``a.b.c``, which may be a module), relative ones resolved in
    ``package`` (the file's package; ``None`` for the job file: it has none); none if the file does not parse
    (its own import then reports it)."""
    try:
        with open(file, encoding="utf-8") as handle:
            tree = ast.parse(handle.read(), filename=file)
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return set()
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                base = node.module or ""
            else:
                parts = (package or "").split(".")
                if not package or node.level > len(parts):
                    continue  # (not in a package: its import fails under python too)
                base = ".".join(part for part in [*parts[: len(parts) - node.level + 1], node.module or ""] if part)
            if base:
                names.add(base)
                names.update(f"{base}.{alias.name}" for alias in node.names if alias.name != "*")
    return names


class _JobModules:
    """The modules beside one job's file in a task process: their sources, and the modules made of them while
    another job ran (kept aside so that this job's code, which refers to them, finds the same modules again)."""

    def __init__(self, sources: dict[str, tuple[str, str | None]]) -> None:
        self.sources = sources
        self.tops = {name.partition(".")[0] for name in sources}
        self.aside: dict[str, types.ModuleType] = {}

    def owns(self, name: str) -> bool:
        """Whether ``name`` is one of these modules or a submodule of one (``mylib.ext``, a compiled module of a
        package beside the job file that Python found from the package's directory)."""
        return name.partition(".")[0] in self.tops


class _BesideFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves the modules beside the job file of the job whose tasks this process runs now (one at a time), as
    the job file's directory would at the head of ``sys.path``: ahead of any module of the same name this process
    has imported (the standard library's ``calendar`` when the job has its own), which is set aside while the job
    runs. Switching to another job sets the previous job's modules aside, so each job gets its own ``helper``."""

    def __init__(self) -> None:
        self.job: _JobModules | None = None
        self.shadowed: dict[str, types.ModuleType] = {}

    def serve(self, job: _JobModules) -> None:
        if job is self.job:
            return
        if self.job is not None:
            previous = self.job
            previous.aside = {name: sys.modules.pop(name) for name in list(sys.modules) if previous.owns(name)}
            sys.modules.update(self.shadowed)
        self.shadowed = {name: sys.modules.pop(name) for name in list(sys.modules) if job.owns(name)}
        sys.modules.update(job.aside)
        self.job = job

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if self.job is None or name not in self.job.sources:
            return None
        file, text = self.job.sources[name]
        if text is None:  # a namespace package: a module with a path and no code (python gives it no __file__)
            spec = importlib.machinery.ModuleSpec(name, self, is_package=True)
            spec.submodule_search_locations = [file]
            return spec
        package = os.path.basename(file) == "__init__.py"
        spec = importlib.machinery.ModuleSpec(name, self, origin=file, is_package=package)
        if package:  # (what it does not ship, a compiled module, Python finds in its directory, if there)
            spec.submodule_search_locations = [os.path.dirname(file)]
        spec.has_location = True  # so the module gets __file__ and tracebacks name it
        return spec

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        return None

    def exec_module(self, module: types.ModuleType) -> None:
        file, text = self.job.sources[module.__name__]  # type: ignore[union-attr]  # (find_spec checked)
        if text is not None:
            exec(compile(text, file, "exec"), module.__dict__)

    def get_source(self, name: str) -> str | None:
        """The text of a served module, for tracebacks (``linecache``) where its file is not on this host."""
        return self.job.sources[name][1] if self.job is not None and name in self.job.sources else None


_beside_finder = _BesideFinder()


@lru_cache(maxsize=16)
def _load(job_code: bytes) -> tuple[type[Job], _JobModules]:
    source, beside, class_code = pickle.loads(job_code)  # as dump_job_class wrote it
    modules = _JobModules(beside)
    _serve(modules)  # the class refers to the modules beside its file by name
    job_class = cloudpickle.loads(class_code)
    if not (isinstance(job_class, type) and issubclass(job_class, Job)):
        raise TypeError(f"job code does not hold a hop.Job subclass but {job_class!r}")
    if source:
        restore_source_file(job_class, source)
    return job_class, modules


def _serve(modules: _JobModules) -> None:
    if _beside_finder not in sys.meta_path:
        sys.meta_path.insert(0, _beside_finder)  # the job's directory comes first, as for ``python job.py``
    _beside_finder.serve(modules)


def load_job_class(job_code: bytes) -> type[Job]:
    """The job class ``job_code`` holds. From now on, an ``import`` of a module beside the job file (in a method)
    finds that job's module, the one the class's code refers to, until another job is loaded (a task process runs
    one task at a time)."""
    job_class, modules = _load(job_code)
    _serve(modules)
    return job_class


def load_job_class_in_client(job_code: bytes) -> type[Job]:
    """The job class ``job_code`` holds, in the process that made it (a client counting a job's steps): the modules
    beside the job file that the class refers to are this process's own, already imported, so nothing is served
    (serving would set them aside and make copies of them here)."""
    _, _, class_code = pickle.loads(job_code)
    job_class = cloudpickle.loads(class_code)
    if not (isinstance(job_class, type) and issubclass(job_class, Job)):
        raise TypeError(f"job code does not hold a hop.Job subclass but {job_class!r}")
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
