"""hop.jobspec: job classes travel by value and keep their source file (user tracebacks show the user's lines)."""

from __future__ import annotations

import sys
import types
from pathlib import Path
from typing import Any

import pytest

import hop.jobspec
from hop.jobspec import dump_job_class, load_job_class, restore_source_file, sources_beside
from hop.loader import JobFileError, load_job_file

JOBS = Path(__file__).parent / "jobs"


def test_a_job_class_round_trip_keeps_its_source_file() -> None:
    path = JOBS / "failing_map.py"
    loaded = load_job_class(dump_job_class(load_job_file(str(path))))
    assert loaded.map.__code__.co_filename == str(path)


def test_code_rebuilt_as_dynamic_gets_the_file_back() -> None:
    # What cloudpickle >= 3.1 does to code it pickles by value, done by hand so the test holds on every version.
    def helper(values):
        return sum(value for value in values)  # a nested code object (the generator expression)

    class Base:
        def reduce(self, key, values):
            return helper(values)

    class Job(Base):
        @staticmethod
        def parse(text):
            return text.split()

    def dynamic(function: types.FunctionType) -> None:
        code = function.__code__
        consts = tuple(
            c.replace(co_filename="<dynamic-code>") if isinstance(c, types.CodeType) else c for c in code.co_consts
        )
        function.__code__ = code.replace(co_filename="<dynamic-code>", co_consts=consts)

    for function in (helper, Base.reduce, Job.__dict__["parse"].__func__):
        dynamic(function)
    Base.reduce.__globals__["helper"] = helper  # as in a by-value module, the helper is a global of the methods
    try:
        restore_source_file(Job, "/src/user_job.py")
    finally:
        del Base.reduce.__globals__["helper"]
    assert Base.reduce.__code__.co_filename == "/src/user_job.py"
    assert Job.__dict__["parse"].__func__.__code__.co_filename == "/src/user_job.py"
    assert helper.__code__.co_filename == "/src/user_job.py"
    nested = [c for c in helper.__code__.co_consts if isinstance(c, types.CodeType)]
    assert nested and all(c.co_filename == "/src/user_job.py" for c in nested)
    assert Job().reduce("k", [1, 2]) == 3


def test_hooks_defined_as_methods_belong_to_a_jobs_single_step() -> None:
    """mrjob-style ``reducer_final``/``mapper_init`` methods on a job without ``steps()`` were ignored, and their
    pairs never written."""
    from hop import Job

    class Hooks(Job):
        def mapper_init(self) -> Any:
            yield "started", 1

        def reducer_final(self) -> Any:
            yield "total", 2

    (step,) = Hooks().resolved_steps()
    assert step.hooks == ["mapper_init", "reducer_final"]
    assert step.reducer_final is not None and list(step.reducer_final() or ()) == [("total", 2)]
    assert Job().resolved_steps()[0].hooks == []


def test_the_sources_beside_a_job_file_are_its_packages_and_modules_within_a_cap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What travels with a job: every module of a package it imports (subpackages included, not a directory without
    ``__init__.py`` nor a cache), single files its imports name, a standard library name; not the engine's own
    packages, nor a built-in module. Past the cap, the job file is refused naming the cap and what to do."""
    (tmp_path / "mylib" / "sub").mkdir(parents=True)
    (tmp_path / "mylib" / "data").mkdir()
    (tmp_path / "mylib" / "__pycache__").mkdir()
    for name in ("mylib/__init__.py", "mylib/sub/__init__.py", "mylib/sub/deep.py", "mylib/data/loose.py"):
        (tmp_path / name).write_text("from . import x\n" if name.endswith("deep.py") else "import tokens\n")
    (tmp_path / "mylib" / "__pycache__" / "stale.py").write_text("")
    for name in ("tokens", "calendar", "hop", "sys"):
        (tmp_path / f"{name}.py").write_text("")
    (tmp_path / "job.py").write_text(
        "import sys\n\nimport hop\nfrom mylib.sub.deep import x\n\n\ndef f():\n    import calendar\n"
    )
    monkeypatch.delitem(sys.modules, "calendar", raising=False)  # (as in a client that has not imported it)
    sources = sources_beside(str(tmp_path / "job.py"))
    assert sorted(sources) == ["calendar", "mylib", "mylib.sub", "mylib.sub.deep", "tokens"]
    assert sources["mylib.sub"][0] == str(tmp_path / "mylib" / "sub" / "__init__.py")
    monkeypatch.setattr(hop.jobspec, "MAX_BESIDE_BYTES", 20)
    with pytest.raises(JobFileError, match=r"hold more than 20 bytes of Python source \(\d+ with mylib\).*pip install"):
        load_job_file(str(tmp_path / "job.py"))


def write_namespace_job(folder: Path) -> None:
    """A job file importing from ``mylib/``, a directory without ``__init__.py`` (a namespace package), at the top
    and in a method; beside it a module of ``mylib`` no import names, a ``data/`` directory with a script and a
    ``json/`` directory of data."""
    (folder / "mylib" / "extra").mkdir(parents=True)
    (folder / "mylib" / "parse.py").write_text(
        "from .util import clean\n\n\ndef fields(line):\n    return [clean(word) for word in line.split()]\n"
    )
    (folder / "mylib" / "util.py").write_text("def clean(word):\n    return word.strip('.,').lower()\n")
    (folder / "mylib" / "unused.py").write_text("import never_imported\n")
    (folder / "mylib" / "extra" / "loud.py").write_text("def shout(word):\n    return word.upper()\n")
    (folder / "data" / "more").mkdir(parents=True)
    (folder / "data" / "script.py").write_text("print('a script')\n")
    (folder / "json").mkdir()
    (folder / "json" / "a.json").write_text("{}\n")
    (folder / "job.py").write_text(
        "import json\n\nfrom hop import Job\nfrom hop.aggregates import Sum\nfrom mylib.parse import fields\n\n\n"
        "class Words(Job):\n    def map(self, offset, line):\n        from mylib.extra import loud\n\n"
        "        for word in fields(line):\n            yield loud.shout(word), 1\n\n    combine = reduce = Sum()\n"
    )


def test_a_namespace_package_travels_as_far_as_the_imports_name_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A directory without ``__init__.py`` beside a job file did not travel, so ``from mylib.parse import fields``
    failed in tasks where ``python job.py`` runs; now its modules that the imports name travel (a relative import's
    too), with its namespace directories, and nothing else: not a module no import names, not ``data/``, and not
    ``json/`` (``python`` imports the standard library's ``json`` over a directory without ``__init__.py``)."""
    write_namespace_job(tmp_path)
    job, util = str(tmp_path / "job.py"), tmp_path / "mylib" / "util.py"
    monkeypatch.setattr(sys, "path", [*sys.path])  # (load_job_file puts the job's directory first)
    try:
        for _ in range(2):  # before the job file ran (no ``mylib`` imported) and after
            sources = sources_beside(job)
            assert sorted(sources) == ["mylib", "mylib.extra", "mylib.extra.loud", "mylib.parse", "mylib.util"]
            assert sources["mylib"] == (str(tmp_path / "mylib"), None)
            assert sources["mylib.extra"] == (str(tmp_path / "mylib" / "extra"), None)
            assert sources["mylib.util"] == (str(util), util.read_text())
            load_job_file(job)
    finally:
        for name in [name for name in sys.modules if name.partition(".")[0] == "mylib"]:
            del sys.modules[name]


def test_a_package_python_finds_without_the_job_directory_does_not_travel(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job file beside a package installed in development mode (found through another entry of the path, a link
    here): task processes import the package by name, as the engine's own, so its sources do not travel, nor count
    against the cap."""
    (tmp_path / "project" / "mylib").mkdir(parents=True)
    (tmp_path / "project" / "mylib" / "__init__.py").write_text("VALUE = 1\n")
    (tmp_path / "project" / "helper.py").write_text("")
    (tmp_path / "project" / "job.py").write_text("import helper\nimport mylib\n")
    job = str(tmp_path / "project" / "job.py")
    assert sorted(sources_beside(job)) == ["helper", "mylib"]
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "mylib").symlink_to(tmp_path / "project" / "mylib")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    assert sorted(sources_beside(job)) == ["helper"]


def test_a_client_reading_its_own_job_code_keeps_its_modules(tmp_path: Path) -> None:
    """Counting a job's steps in the client (``hop.runner``) reads back the job code it made: the modules beside the
    job file stay the client's own (serving them as a task process does set them aside, and the job's next
    payload pickled copies of them by value)."""
    name = f"client_helper_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text("def words(line):\n    return line.split()\n")
    (tmp_path / "job.py").write_text(
        f"from hop import Job\nfrom {name} import words\n\n\nclass Words(Job):\n"
        "    def map(self, offset, line):\n        for word in words(line):\n            yield word, 1\n"
    )
    job_class = load_job_file(str(tmp_path / "job.py"))
    helper = sys.modules[name]
    try:
        loaded = hop.jobspec.load_job_class_in_client(dump_job_class(job_class))
        assert sys.modules[name] is helper and loaded.map.__globals__["words"] is helper.words
    finally:
        del sys.modules[name]
