"""Running an unmodified mrjob ``MRJob`` on hop (``hop run --mrjob JOB.py IN... -o OUT [-- job options]``).

What runs as under mrjob (see mrjob's documentation for the semantics):

- ``mapper``/``combiner``/``reducer`` and ``steps()`` with ``MRStep``; ``mapper_init``/``mapper_final`` and
  ``reducer_init``/``reducer_final`` run once per task attempt, as mrjob runs them once per task. A combiner with
  ``combiner_init``/``combiner_final`` is not run (mrjob allows any combiner to be skipped; see ``hop.job.Step``).
- Protocols, as ``MRJob.pick_protocols`` picks them: INPUT_PROTOCOL reads each input line, INTERNAL_PROTOCOL
  carries records between substeps (JSON ones as plain values, any other as its encoded lines, grouped and sorted
  as Hadoop would: ``hop.mrjob_codec``), OUTPUT_PROTOCOL writes the output, so the ``part-*`` files hold exactly
  the lines mrjob writes. Float NaN keys group as one key, as mrjob groups their JSON text ``NaN``.
  ``SORT_VALUES`` sorts each key's values by their encoded form, as under Hadoop, for the reducer and the combiner.
- Hadoop streaming's ``reporter:counter:GROUP,COUNTER,AMOUNT`` and ``reporter:status:MESSAGE`` lines the job
  writes to ``sys.stderr`` itself count and set the status, as mrjob's runners parse them (``hop.mrjob_reporter``).
- ``increment_counter`` adds to hop's user counters (``_job.json``, and printed under the summary line).
  ``set_status`` sends the message to the coordinator (``hop.task_status``), which ``hop run`` and ``hop submit``
  print as ``hop: JOB status (task map 3): MESSAGE`` above their progress bars and ``hop status JOB_ID`` shows:
  whenever the message changes, at most once a second, and the latest one when the attempt ends (failed too:
  its report keeps it, ``status_message``); a pipeline's steps each as they come, named by their step.
- The job's own options (``configure_args`` with ``add_passthru_arg``/``add_file_arg``) go after ``--``:
  ``hop run --mrjob job.py IN -o OUT -- --my-option 3``; of mrjob's runner options there, ``--jobconf``,
  ``--files`` and ``--dirs`` are followed, those that only say how mrjob runs (``-r``, ``--no-conf``) ignored
  with a warning, any other refused (:func:`_check_runner_options`). ``FILES`` and ``DIRS`` are found as mrjob
  finds them (beside the job file) and are in the working directory of every task while it runs, as under
  mrjob; file options are passed to the tasks as absolute paths. ``mapreduce.task.partition`` and the other names
  of the task say which task runs (:func:`_task_environment`).
- A task's job is made as in mrjob's tasks (:meth:`MRJobAdapter.setup`): its ``load_args`` finds ``is_task()`` true,
  ``options.step_num`` and ``run_mapper``/``run_reducer`` saying which task, file options absolute paths.
- ``jobconf_from_env("mapreduce.map.input.file")`` names the file a mapper reads, and ``mapreduce.map.input.start``
  and ``mapreduce.map.input.length`` the byte range of it the map reads, as Hadoop streaming and mrjob's runners
  set them (:func:`_input_environment`; the old names, ``map.input.file``..., are set too, as mrjob's local runners
  set both). They say the range being read, from ``mapper_init`` on: a map reading several (``--order random``
  deals several chunks to a map) says each from its first record on. A map tail-split while it reads a range
  (``hop.scheduler``) says the part of it it keeps from its next record on, and the new map reading the rest says
  that rest: the ranges the maps end with cover each file exactly, once, as Hadoop's splits do (the records read
  before the split were said to be in the longer range, which holds them too). A file read whole (compressed, or
  by ``mapper_raw``) is ``0`` and the file's size in bytes (a compressed one's, as Hadoop and mrjob count it). A
  later step's map reading the step before's partition as it is written (pipelined) reads no byte range of a file:
  start and length are not set; a ``--blocking`` one reads the part file whole, ``0`` and its size.

- The number of reducers of each step follows its jobconf (``JOBCONF``, ``--jobconf`` after ``--``,
  ``MRStep(jobconf=...)``): ``mapreduce.job.reduces`` or ``mapred.reduce.tasks``; ``hop run --reducers`` wins
  over it (``hop.mrjob_jobconf``). All of a step's settings are in its tasks' environment, where
  ``jobconf_from_env`` finds them, as mrjob's local runners put them there.

- ``mapper_raw(input_path, input_uri)`` (first step only, as under mrjob) is called once per input file, each
  file a map task of its own, not split and not read by hop (:attr:`hop.jobspec.JobSpec.reads_whole_files`); as
  under ``mrjob -r local``, ``input_uri`` is the file's absolute path, and ``input_path`` its content's: the file
  itself, or for a ``.gz`` or ``.bz2`` file a decompressed copy (:func:`_raw_input`).

Refused with a clear error: command substeps, pre-filters, ``mapper_raw`` after the first step, Spark and jar
steps, Hadoop input and output formats, ``ARCHIVES``. Not followed, with a warning naming them: the other jobconf
settings, ``PARTITIONER`` (hop partitions by its own hash). Named in a warning: a reducer reading a value protocol
(every key None), which mrjob calls once per reducer task and hop once per distinct line
(:func:`_warn_keyless_reducer`).
"""

from __future__ import annotations

import bz2
import contextlib
import gzip
import itertools
import json
import os
import shlex
import shutil
import sys
import types
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from hop import mrjob_reporter, task_status
from hop.inputs import Split
from hop.job import Job, Step, TaskIdentity
from hop.loader import JobFileError
from hop.mrjob_codec import Edge, InputEdge, as_text, line_of_output, plan_edges
from hop.mrjob_jobconf import step_jobconfs
from hop.mrjob_loader import MRJobNotAvailable, load_mrjob_file
from hop.outputs import JOB_REPORT, OutputWriteError, output_write_error, write_job_report, writing_output
from hop.spilldirs import make_marked_dir
from hop.usercode import call_user
from hop.usertrace import user_traceback

__all__ = ["MRJobAdapter", "MRJobNotAvailable", "MRJobRun", "load_mrjob_file", "rewrite_output"]

_UNSUPPORTED = (
    "mapper_cmd",
    "mapper_pre_filter",
    "combiner_cmd",
    "combiner_pre_filter",
    "reducer_cmd",
    "reducer_pre_filter",
)
FILES_PREFIX = ".hop-mrjob-files-"
"""The name of the folder (beside the output directory) of the tasks' working directory, up to its random part."""
RAW_PREFIX = "hop-mrjob-raw-"
"""The name of the folder (in the system's temporary directory) of a compressed file decompressed for
``mapper_raw``, up to its random part."""
_DECOMPRESSED = {".gz": gzip, ".bz2": bz2}
"""The inputs decompressed for ``mapper_raw``, by suffix: those mrjob's runners decompress for it (gunzip,
bunzip2); any other file is given as it is."""
_INPUT_VARIABLES = {
    "file": ("mapreduce_map_input_file", "map_input_file"),
    "start": ("mapreduce_map_input_start", "map_input_start"),
    "length": ("mapreduce_map_input_length", "map_input_length"),
}
"""What says which input a mapper reads, by the Hadoop 2 and Hadoop 1 names (``mapreduce.map.input.file`` and
``map.input.file``...) as environment variables, where ``mrjob.compat.jobconf_from_env`` looks for either name:
mrjob's local runners set both (they translate their jobconf for all Hadoop versions unless given one)."""
_HADOOP_1_TASK_NAMES = {
    "mapreduce_job_id": "mapred_job_id",
    "mapreduce_task_id": "mapred_tip_id",
    "mapreduce_task_attempt_id": "mapred_task_id",
    "mapreduce_task_ismap": "mapred_task_is_map",
    "mapreduce_task_partition": "mapred_task_partition",
}
"""The Hadoop 1 names of what says which task runs (``_task_environment``), by their Hadoop 2 names, from mrjob's
translation table (``mrjob.compat``), as environment variables."""
_REWRITE_BATCH = 1 << 16

_home: str | None = None
"""This process's working directory before any task entered a job's working directory."""


class MRJobRun:
    """The submitting side of one mrjob run: checks the job and its options, makes the tasks' working directory
    (links to ``FILES``/``DIRS``, beside the output directory so that every host of a cluster sees it, removed by
    :meth:`close`), and rewrites the output in the job's OUTPUT_PROTOCOL once the run succeeded."""

    def __init__(self, path: str, job_args: list[str], output: str, job_class: str | None = None) -> None:
        """``job_class``: the MRJob subclass to run (``--job-class``), else the one mrjob would run."""
        self.path = path
        self.mrjob_class = load_mrjob_file(path, job_class)
        mr = _instantiate(self.mrjob_class, job_args, path)
        with _reading_settings(mr, path):
            _check_supported(mr, path)
            _check_runner_options(mr, path)
            jobconfs = step_jobconfs(mr, path)
            links = _task_files(mr, path)
            file_options = _file_options(mr, path)  # (before the working directory: it may refuse one)
            task_args = _task_args(mr)
        self.whole_files = mr.steps()[0]["mapper_raw"] is not None
        """Whether the first step's maps read each input file whole (``mapper_raw``: the spec's ``whole_files``)."""
        self.step_reducers: list[int | None] = [conf.reducers for conf in jobconfs]
        """The reducers each step's jobconf asks for (``None``: hop's default), for ``hop run`` without
        ``--reducers``."""
        self.step_task_timeouts: list[float | None] = [conf.task_timeout for conf in jobconfs]
        """The task timeout each step's jobconf sets, in seconds (``None``: none), for ``hop run`` without
        ``--task-timeout``."""
        ignored = {f"{name}={value}" for conf in jobconfs for name, value in conf.ignored.items()}
        if ignored:
            print(
                f"hop: warning: {path}: jobconf hop does not follow (the job still reads it with jobconf_from_env): "
                f"{', '.join(sorted(ignored))}",
                file=sys.stderr,
            )
        self._marked: Path | None = None
        self.workdir: str | None = None
        if links:
            parent = Path(output).resolve().parent
            parent.mkdir(parents=True, exist_ok=True)
            # Marked as this process's: a `hop run`/`hop submit` killed outright (-9) cannot remove it, and the
            # next run making one beside its output removes it then (hop.spilldirs). The links are a folder down,
            # so that the marking is not in the tasks' working directory (a FILES entry may be named `owner`).
            self._marked = make_marked_dir(str(parent), FILES_PREFIX)
            try:
                os.mkdir(self._marked / "files")
                for name, target in links.items():
                    os.symlink(target, self._marked / "files" / name)
            except BaseException:
                shutil.rmtree(self._marked, ignore_errors=True)
                raise
            self.workdir = str(self._marked / "files")
        attributes = {
            "__module__": self.mrjob_class.__module__,  # pickled by value with the user's module (hop.jobspec)
            "__qualname__": self.mrjob_class.__name__,
            "mrjob_class": self.mrjob_class,
            "mrjob_args": list(job_args),
            "mrjob_workdir": self.workdir,
            "mrjob_file_options": file_options,
            "mrjob_task_args": task_args,
            "mrjob_environments": [conf.environment for conf in jobconfs],
        }
        self.job_class: type[Job] = type(self.mrjob_class.__name__, (MRJobAdapter,), attributes)

    def write_output(self, output: str, report: dict[str, Any]) -> None:
        """After a successful run (``report``: its ``_job.json``): the output in the job's OUTPUT_PROTOCOL
        (:func:`rewrite_output`), then its ``_SUCCESS``, which the coordinator left to this (the spec's
        ``success_by_client``).

        A file that cannot be written there (a full disk or quota, an I/O error) fails the job, as a ``_job.json``
        the coordinator cannot write does: its parts are removed (some may be rewritten, the rest not: no whole
        output either way), which may make room for a ``_job.json`` saying why, written over the one that said the
        job succeeded (removed if it cannot be); then :class:`OutputWriteError` says it all, naming the file and
        what to do. It was a traceback, with a half-written hidden copy of a part left behind and ``_job.json``
        still saying the job succeeded."""
        try:
            rewrite_output(output)
            success = Path(output) / "_SUCCESS"
            with writing_output(success):
                success.touch()
        except OutputWriteError as error:
            reason = (
                f"the job ran to its end, but {error}; without it the output is incomplete: the job failed and its "
                "part files were removed"
            )
            failure = OutputWriteError(_unmark(output, report, reason))
            failure.errno = error.errno
            raise failure from error

    def close(self) -> None:
        if self._marked is not None:
            shutil.rmtree(self._marked, ignore_errors=True)
            self._marked = self.workdir = None

    def __enter__(self) -> MRJobRun:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _instantiate(mrjob_class: type[Any], job_args: list[str], path: str) -> Any:
    try:
        return mrjob_class(args=list(job_args))
    except (SystemExit, ValueError) as error:  # mrjob's argument parser rejected them (ValueError: its message)
        if isinstance(error, SystemExit) and error.code in (0, None):
            raise  # (``-- --help``: mrjob printed the job's options, as asked; nothing is wrong)
        reason = f": {error}" if isinstance(error, ValueError) else ""
        raise JobFileError(
            f"{path}: bad job arguments {job_args!r}{reason}; see `python {path} --help` for the job's options, "
            "given after --"
        ) from None
    except Exception as error:  # the user's own __init__ (or configure_args): its traceback says where
        raise JobFileError(
            f"{path}: the job failed to start with arguments {job_args!r}: {type(error).__name__}: {error}",
            user_traceback(error),
        ) from error


@contextmanager
def _reading_settings(mr: Any, path: str) -> Iterator[None]:
    """Around the calls of the job's methods that give its settings (``files()``, ``jobconf()``,
    ``partitioner()``...: the job may override any of them): one that raises refuses the job with its traceback
    (:class:`JobFileError`), where ``hop run`` crashed with its own."""
    try:
        yield
    except JobFileError:
        raise
    except Exception as error:  # (the traceback is whole where it passed through no code of the job's or mrjob's)
        raise JobFileError(
            f"{path}: {type(mr).__name__} raised {type(error).__name__}: {error} as hop read its settings",
            user_traceback(error),
        ) from error


def _check_supported(mr: Any, path: str) -> None:
    name = type(mr).__name__
    if mr.options.args:
        raise JobFileError(
            f"{path}: {mr.options.args!r} after -- are input paths to mrjob; give inputs before --, to hop"
        )
    try:
        mr_steps = mr.steps()
    except Exception as error:  # the user's own steps() (an MRStep naming a method it lacks): hop run crashed
        raise JobFileError(
            f"{path}: {name}().steps() raised {type(error).__name__}: {error}", user_traceback(error)
        ) from error
    if not mr_steps:
        raise JobFileError(f"{path}: {name} defines no mapper, combiner or reducer (and no steps())")
    for number, mr_step in enumerate(mr_steps):
        description = mr_step.description(number)
        kind = description.get("type", "streaming")
        if kind != "streaming":
            raise JobFileError(f"{path}: {name} step {number + 1} is a {kind} step; hop runs mapper/reducer steps")
        unsupported = [field for field in _UNSUPPORTED if mr_step[field] is not None]
        if unsupported:
            commands = ", ".join(f"{field} ({_command(mr_step[field])})" for field in unsupported)
            instead = (
                "filter the lines in the step's Python mapper (or combiner, reducer) instead"
                if all(field.endswith("_pre_filter") for field in unsupported)
                else "write the step's mapper, combiner and reducer in Python instead"
            )
            raise JobFileError(
                f"{path}: {name} step {number + 1} uses {commands}: shell commands, which hop does not run (it runs "
                f"the job's Python mappers, combiners and reducers); {instead}"
            )
        if number and mr_step["mapper_raw"] is not None:
            raise JobFileError(
                f"{path}: {name} step {number + 1} uses mapper_raw, which reads the job's input files: only the first "
                "step may (as under mrjob)"
            )
        if "reducer" in description:
            _warn_keyless_reducer(mr, number, path)
    for attribute, value in (
        ("HADOOP_INPUT_FORMAT", mr.hadoop_input_format()),
        ("HADOOP_OUTPUT_FORMAT", mr.hadoop_output_format()),
    ):
        if value:
            raise JobFileError(f"{path}: {name} sets {attribute} ({value}); hop reads and writes text lines only")
    if mr.archives():
        raise JobFileError(f"{path}: {name} uses ARCHIVES; hop does not unpack archives (FILES and DIRS work)")
    if mr.partitioner():
        print(f"hop: warning: {path}: PARTITIONER is ignored on hop ({mr.partitioner()!r})", file=sys.stderr)


_RUNNER_OPTIONS_FOLLOWED = {"jobconf", "upload_files", "upload_dirs"}
"""mrjob's runner options (given after ``--``) that hop follows: ``--jobconf`` (``hop.mrjob_jobconf``), ``--files``
and ``--dirs``."""
_RUNNER_OPTIONS_IRRELEVANT = {
    "runner",
    "conf_paths",
    "quiet",
    "verbose",
    "cleanup",
    "cleanup_on_failure",
    "local_tmp_dir",
    "num_cores",
    "label",
    "owner",
    "cat_output",
}
"""mrjob's runner options that say how mrjob runs the job and change nothing of its result (``-r local``, ``-c``,
``--num-cores``, ``--no-output``: whether mrjob prints the output once written, which hop never does...): ignored
with a warning naming them. Any other is refused: it would change what the job sees
(``--cmdenv``, ``--setup``, ``--archives``, ``--output-dir``) or belongs to a cluster mrjob would start."""


def _check_runner_options(mr: Any, path: str) -> None:
    """Refuse the mrjob runner options given after ``--`` that hop does not follow, naming them (they were
    ignored without a word: ``-- --cmdenv X=1`` gave the tasks no ``X``), and name the irrelevant ones."""
    job_options = set(mr._passthru_arg_dests) | set(mr._file_arg_dests)
    names: dict[str, list[str]] = {}  # dest -> its long switches (conf_paths: --conf-path, --no-conf)
    for action in mr.arg_parser._actions:
        names.setdefault(action.dest, []).extend(name for name in action.option_strings if name.startswith("--"))
    switches = {dest: "/".join(long) for dest, long in names.items() if long}
    given = [
        dest
        for dest, value in vars(mr.options).items()
        if dest in switches and dest not in job_options and value != mr.arg_parser.get_default(dest)
    ]
    refused = [switches[dest] for dest in given if dest not in _RUNNER_OPTIONS_FOLLOWED | _RUNNER_OPTIONS_IRRELEVANT]
    if refused:
        raise JobFileError(
            f"{path}: hop runs the job itself and does not follow mrjob's runner option(s) {', '.join(refused)} "
            "(after --, with the job's own options): drop them; hop follows --jobconf, --files and --dirs, and its "
            "own options go before --"
        )
    ignored = [switches[dest] for dest in given if dest in _RUNNER_OPTIONS_IRRELEVANT]
    if ignored:
        print(f"hop: warning: {path}: mrjob runner option(s) ignored on hop: {', '.join(ignored)}", file=sys.stderr)


def _command(command: Any) -> str:
    """A step's command (a string, or mrjob's list of arguments) as a shell would read it."""
    return command if isinstance(command, str) else shlex.join(str(argument) for argument in command)


def _warn_keyless_reducer(mr: Any, number: int, path: str) -> None:
    """Name a reducer that reads its records with one of mrjob's value protocols (INTERNAL_PROTOCOL =
    ReprValueProtocol...): its every key is None, so mrjob's reducer code, which groups neighbouring lines whose
    keys decode equal, calls it once for all the lines of a reducer task (as many calls as its runner makes
    tasks), where hop, grouping by the lines' text, calls it once per distinct line."""
    reader = mr.pick_protocols(number, "reducer")[0]
    kind = type(getattr(reader, "__self__", reader))
    if kind.__module__ == "mrjob.protocol" and kind.__name__.endswith("ValueProtocol"):
        print(
            f"hop: warning: {path}: {type(mr).__name__} step {number + 1}'s reducer reads {kind.__name__}, whose keys "
            "are all None: mrjob calls it once per reducer task with all of that task's values, hop once per "
            "distinct encoded value (use a key/value protocol, e.g. ReprProtocol, to group by key)",
            file=sys.stderr,
        )


def _task_files(mr: Any, path: str) -> dict[str, str]:
    """Name in the tasks' working directory -> absolute path, for the job's FILES and DIRS and the ``--files`` and
    ``--dirs`` given after ``--`` (``path#name`` too), as mrjob's runners combine them."""
    links: dict[str, str] = {}
    given = [*(mr.options.upload_files or ()), *(mr.options.upload_dirs or ())]
    for entry in [*mr.files(), *mr.dirs(), *given]:
        source, _, name = os.path.expandvars(os.path.expanduser(entry)).partition("#")
        name = name or os.path.basename(source.rstrip(os.sep))
        if not os.path.exists(source):
            raise JobFileError(
                f"{path}: {entry} (in the job's FILES/DIRS or --files/--dirs) does not exist; put it beside the job"
            )
        links[name] = os.path.abspath(source)
    return links


def _file_options(mr: Any, path: str) -> dict[str, Any]:
    """The job's file options (``add_file_arg``) as absolute paths: tasks run in another working directory. One
    naming no file is refused (:class:`JobFileError`), as mrjob refuses to start without it (a job opening it in its
    ``mapper_init`` failed on the cluster, after its start)."""
    switches = {action.dest: action.option_strings[-1] for action in mr.arg_parser._actions if action.option_strings}

    def absolute(value: str) -> str:
        found = os.path.abspath(os.path.expanduser(value.partition("#")[0]))
        if not os.path.exists(found):
            raise JobFileError(
                f"{path}: {switches.get(dest, dest)} {value}: no such file ({found}); the job's file option must "
                "name an existing file"
            )
        return found

    options: dict[str, Any] = {}
    for dest in sorted(getattr(mr, "_file_arg_dests", ())):
        value = getattr(mr.options, dest, None)
        if isinstance(value, str):
            options[dest] = absolute(value)
        elif isinstance(value, list):
            options[dest] = [absolute(item) for item in value]
    return options


def _task_args(mr: Any) -> list[str]:
    """The job's arguments as mrjob gives them to its tasks (``MRJob._non_option_kwargs``' ``extra_args``): its own
    options (``add_passthru_arg``), and its file options (``add_file_arg``) as absolute paths, since a task runs in
    another working directory; not mrjob's runner options. A task's ``load_args`` reads them, with which task it is
    (:meth:`MRJobAdapter.setup`)."""
    from mrjob.options import _parse_raw_args  # (mrjob is imported only for an mrjob job: hop.mrjob_loader)

    args: list[str] = []
    for dest, option, values in _parse_raw_args(mr.arg_parser, mr._cl_args):
        if dest in mr._file_arg_dests:
            args += [option, os.path.abspath(os.path.expanduser(values[0].partition("#")[0]))]
        elif dest in mr._passthru_arg_dests:
            if option and len(values) == 1 and values[0].startswith("-"):  # (--offset=-5: as mrjob passes it)
                args.append(f"{option}={values[0]}")
            else:
                args += [*([option] if option else []), *values]
    return args


def _importable_job_module(mrjob_class: type[Any]) -> None:
    """Make the job file's module importable by its name in a task process, as the module of the classes it
    defines: the job's code came pickled by value (``hop.jobspec``), so no module of that name is there, and
    ``pickle`` finds a class by its module's name. Without it an ``INTERNAL_PROTOCOL = PickleProtocol`` job whose
    keys or values are instances of a class of its file (a namedtuple, a dataclass) failed to write them (``Can't
    pickle <class 'hop_mrjob_job_....Point'>: import of module ... failed``), where mrjob, running the file as
    ``__main__`` in every task, pickles them. The module holds the globals the job's code refers to (cloudpickle
    rebuilt one namespace for all of them); in the process that loaded the file, its own module is left alone."""
    name = mrjob_class.__module__
    namespace = next(
        (
            value.__globals__
            for klass in mrjob_class.__mro__
            for value in vars(klass).values()
            if isinstance(value, types.FunctionType) and value.__module__ == name
        ),
        None,
    )
    loaded = sys.modules.get(name)
    if namespace is None or (loaded is not None and vars(loaded) is namespace):
        return
    module = types.ModuleType(name)
    vars(module).update(namespace)
    sys.modules[name] = module


@contextmanager
def _working_directory(workdir: str | None) -> Iterator[None]:
    _enter(workdir)
    try:
        yield
    finally:
        _leave(workdir)


def _enter(workdir: str | None) -> None:
    global _home
    if workdir is not None:
        if _home is None:
            _home = os.getcwd()
        os.chdir(workdir)


_environment: dict[str, str | None] = {}
"""The variables :func:`_set_environment` set last in this process, and what they were before."""


def _set_environment(variables: dict[str, str], unset: Iterable[str] = ()) -> None:
    """Put a step's jobconf in this task process's environment, where ``jobconf_from_env`` finds it, without the
    variables ``unset``, once the variables the last call set or unset (another job's, or another step's) are as
    they were before it."""
    for name, before in _environment.items():
        if before is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = before
    _environment.clear()
    for name in unset:
        _environment[name] = os.environ.pop(name, None)
    for name, value in variables.items():
        _environment.setdefault(name, os.environ.get(name))
        os.environ[name] = value


def _task_environment(task: TaskIdentity | None) -> dict[str, str]:
    """The jobconf that says which task runs, as the task's environment variables, where ``jobconf_from_env`` finds
    it, as mrjob's local runners and Hadoop give it (over the job's own settings of those names, as theirs):
    ``mapreduce.task.partition`` (the map's index, or the reduce's partition), ``mapreduce.task.ismap``,
    ``mapreduce.job.id``, ``mapreduce.task.id`` and ``mapreduce.task.attempt.id`` (in Hadoop's form,
    ``attempt_JOB_m_000003_0``). Without them a job making ids unique per task (``mapreduce.task.partition``) got
    ``None`` from ``jobconf_from_env``, where mrjob gives every task its own. Each also under its Hadoop 1 name
    (``mapred.task.partition``...), as mrjob's local runners set both: a job reading ``os.environ`` finds either."""
    if task is None:
        return {}
    kind = "m" if task.kind == "map" else "r"
    task_id = f"{task.job_id}_{kind}_{task.index:06d}"
    values = {
        "mapreduce_job_id": task.job_id,
        "mapreduce_task_id": f"task_{task_id}",
        "mapreduce_task_attempt_id": f"attempt_{task_id}_{task.attempt}",
        "mapreduce_task_ismap": "true" if task.kind == "map" else "false",
        "mapreduce_task_partition": str(task.index),
    }
    return values | {_HADOOP_1_TASK_NAMES[name]: value for name, value in values.items()}


def _input_environment(path: str | None, split: Split | None) -> dict[str, str]:
    """What says which input a mapper reads (by the keys of ``_INPUT_VARIABLES``), as mrjob's runners and Hadoop
    streaming give it: ``file``, the file's ``file://`` URI; ``start`` and ``length``, the byte range of it the map
    reads, where it reads one (``split``): a file read whole (compressed, or by ``mapper_raw``) as ``0`` and the
    file's size in bytes (a compressed one's, as Hadoop and mrjob count it)."""
    if path is None:
        return {}
    values = {"file": "file://" + path}
    if split is not None:
        length = split.length
        if length < 0:
            length = split.stamp.size if split.stamp is not None else os.path.getsize(split.path)
        values["start"], values["length"] = str(split.start), str(length)
    return values


def _leave(workdir: str | None) -> None:
    if workdir is not None and _home is not None:
        os.chdir(_home)


class MRJobAdapter(Job):
    """The hop side of an mrjob job (see the module docstring); :class:`MRJobRun` makes one class per run.

    A failed attempt leaves its task process in the job's working directory until its next mrjob attempt or the
    end of the run (hop calls no teardown after a failure)."""

    mrjob_class: Any = None
    mrjob_args: list[str] = []
    mrjob_workdir: str | None = None
    mrjob_file_options: dict[str, Any] = {}
    mrjob_task_args: list[str] = []
    """The job's own arguments as mrjob passes them to its tasks (:func:`_task_args`)."""
    mrjob_environments: list[dict[str, str]] = []
    """Each step's jobconf as its tasks' environment variables (``hop.mrjob_jobconf.StepJobconf.environment``)."""

    def __init__(self) -> None:
        super().__init__()
        _importable_job_module(self.mrjob_class)
        with _working_directory(self.mrjob_workdir):  # a job may read its FILES when it starts
            self.mr = self.mrjob_class(args=list(self.mrjob_args))
        for dest, value in self.mrjob_file_options.items():
            setattr(self.mr.options, dest, value)
        self._serve()
        self._input_file: str | None = None
        self._input_split: Split | None = None
        """The input file and range the environment names (:meth:`_note_input`)."""

    # Services the mrjob job calls. -------------------------------------------------------------------------------
    def _serve(self) -> None:
        """Counters and status go to hop instead of Hadoop streaming's stderr protocol."""
        self.mr.increment_counter = self._increment_counter
        self.mr.set_status = task_status.setter(type(self.mr).__name__)

    def _increment_counter(self, group: Any, counter: Any, amount: int = 1) -> None:
        if not isinstance(amount, int):
            raise TypeError(f"amount must be an integer, not {amount!r}")  # as mrjob says
        self.increment_counter(str(group).replace(",", ";"), str(counter).replace(",", ";"), amount)

    # The task's life. --------------------------------------------------------------------------------------------
    def setup(self) -> None:
        _enter(self.mrjob_workdir)
        step = self.mrjob_environments[self.step_number] if self.mrjob_environments else {}
        # (A map reading no file, a later step's, has no input file: not the one this process's last map read.)
        unset = [name for names in _INPUT_VARIABLES.values() for name in names]
        _set_environment({**step, **_task_environment(self.task_identity)}, unset=unset)
        if self.task_identity is not None:
            # The job made as mrjob makes it in a task (``--step-num=N --mapper``): its load_args finds is_task()
            # True, which its docstring says a job loads what only its tasks need by (a job skipping that wrote what
            # it should have left out), and reads its file options as paths it can open from here. Its state goes
            # into the instance the step's functions are bound to (resolved before setup), __init__'s too.
            kind = "--mapper" if self.task_identity.kind == "map" else "--reducer"
            args = [*self.mrjob_task_args, f"--step-num={self.step_number}", kind]
            made = call_user(f"{type(self.mr).__name__}()", lambda: self.mrjob_class(args=args))
            vars(self.mr).clear()
            vars(self.mr).update(vars(made))
            self._serve()
        # Hadoop streaming's reporter:counter:/reporter:status: lines the job writes itself count, as under mrjob.
        mrjob_reporter.report_to(self._increment_counter, self.mr.set_status)
        if self.input_file is not None:  # a map: its mapper_init may already ask which file it reads
            self._note_input()

    def teardown(self) -> None:
        mrjob_reporter.report_to(None, None)
        task_status.flush()  # (the engine flushes as the attempt ends; outside an attempt, run by hand, this does)
        _set_environment({})
        _leave(self.mrjob_workdir)

    def _note_input(self) -> None:
        """Say which file the mapper reads, and which byte range of it, where ``jobconf_from_env`` looks (as mrjob's
        runners do): called as the map starts, and whenever it goes on to another range, or its range is shortened
        (:attr:`hop.job.Job.input_split`)."""
        self._input_file, self._input_split = self.input_file, self.input_split
        values = _input_environment(self.input_file, self.input_split)
        for what, names in _INPUT_VARIABLES.items():
            for name in names:
                if what in values:
                    os.environ[name] = values[what]
                else:
                    os.environ.pop(name, None)

    # The steps. --------------------------------------------------------------------------------------------------
    def steps(self) -> list[Step] | None:
        mr = self.mr
        mr_steps = mr.steps()
        descriptions = [mr_step.description(number) for number, mr_step in enumerate(mr_steps)]
        substeps = [
            (number, kind)
            for number, description in enumerate(descriptions)
            for kind in ("mapper", "reducer")
            if kind in description
        ]
        input_edge, edges = plan_edges(substeps, self._protocols)
        sort_values = bool(mr.sort_values())
        steps = []
        for number, (mr_step, description) in enumerate(zip(mr_steps, descriptions, strict=True)):
            mapper = reducer = combiner = None
            shuffled: Edge | None = None  # (the records of the step's combine and reduce)
            map_out = edges.get((number, "mapper"))
            reduce_out = edges.get((number, "reducer"))
            if map_out is not None:
                source = input_edge if substeps[0] == (number, "mapper") else edges[_before(substeps, number, "mapper")]
                if mr_step["mapper_raw"] is not None:  # (the first step's: _check_supported)
                    mapper = self._raw_mapper(mr_step["mapper_raw"], map_out)
                else:
                    mapper = self._mapper(mr_step["mapper"], source, map_out)
                shuffled = map_out
                if "combiner" in description:
                    combiner = _combiner(mr_step["combiner"], map_out, sort_values)
            if reduce_out is not None:
                source = edges[_before(substeps, number, "reducer")]
                assert isinstance(source, Edge), "a job's first substep is always a mapper"
                shuffled = source
                reducer = _reducer(mr_step["reducer"], source, reduce_out, sort_values)
                if mapper is None and source.native:
                    mapper = source.to_shuffle
            elif map_out is not None and map_out.native:  # (hop's identity reduce would write keys' JSON text)
                reducer = map_out.passing_on
            steps.append(
                Step(
                    mapper=mapper,
                    combiner=combiner,
                    reducer=reducer,
                    mapper_init=_hook(mr_step["mapper_init"], map_out),
                    mapper_final=_hook(mr_step["mapper_final"], map_out),
                    combiner_init=_hook(mr_step["combiner_init"], map_out),
                    combiner_final=_hook(mr_step["combiner_final"], map_out),
                    reducer_init=_hook(mr_step["reducer_init"], reduce_out),
                    reducer_final=_hook(mr_step["reducer_final"], reduce_out),
                    show_key=repr if shuffled is None else shuffled.show_key,
                )
            )
        return steps

    def _protocols(self, number: int, kind: str) -> tuple[Any, Any]:
        """The (reader, writer) protocol instances of a substep, as ``MRJob.pick_protocols`` picks them."""
        read, write = self.mr.pick_protocols(number, kind)
        return getattr(read, "__self__", read), getattr(write, "__self__", write)

    def _mapper(self, function: Callable[..., Any], source: Edge | InputEdge, out: Edge) -> Callable[[Any, Any], Any]:
        if not isinstance(source, InputEdge):

            def mapper(key: Any, value: Any) -> Iterable[Any]:
                return out.encode(function(*source.decode(key, value)))

            return mapper
        if source.text_values and out.native:  # mrjob's defaults: the line as value, JSON pairs out as they are
            encode_pairs = out.encode

            def first_mapper(offset: Any, line: str) -> Iterable[Any]:
                if self.input_split is not self._input_split or self.input_file is not self._input_file:
                    self._note_input()
                return encode_pairs(function(None, as_text(line)))

            return first_mapper
        decode, encode = source.decode, out.encode

        def first_mapper_decoding(offset: Any, line: str) -> Iterable[Any]:
            if self.input_split is not self._input_split or self.input_file is not self._input_file:
                self._note_input()
            return encode(function(*decode(offset, line)))

        return first_mapper_decoding

    def _raw_mapper(self, function: Callable[[str, str], Any], out: Edge) -> Callable[[Any, str], Iterator[Any]]:
        """The map of a ``mapper_raw`` step: its one record per task is ``(0, the input file's path)``
        (:attr:`hop.jobspec.JobSpec.reads_whole_files`), which it calls ``mapper_raw(input_path, input_uri)`` with."""

        def raw_mapper(offset: Any, path: str) -> Iterator[Any]:
            if self.input_split is not self._input_split or self.input_file is not self._input_file:
                self._note_input()
            with _raw_input(path) as local:  # (a generator: the copy stays while mapper_raw's pairs are read)
                yield from out.encode(function(local, path))

        return raw_mapper


@contextmanager
def _raw_input(path: str) -> Iterator[str]:
    """The ``input_path`` given to ``mapper_raw`` for the input file ``path`` (its ``input_uri``): the file itself,
    or a ``.gz`` or ``.bz2`` file decompressed into a folder removed on leaving (one left by a task killed outright
    is removed by the next made on that host), named as the file without that suffix, as mrjob's runners give it.
    (mrjob copies even a plain file into the task's directory first: hop's maps read it in place.)"""
    stem, suffix = os.path.splitext(path)
    module = _DECOMPRESSED.get(suffix)
    if module is None:
        yield path
        return
    folder = make_marked_dir(None, RAW_PREFIX)
    try:
        local = folder / "input" / os.path.basename(stem)  # (a folder down: the file may be named ``owner``)
        local.parent.mkdir()
        with module.open(path, "rb") as source, open(local, "wb") as target:
            shutil.copyfileobj(source, target, 1 << 20)
        yield str(local)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _before(substeps: list[tuple[int, str]], number: int, kind: str) -> tuple[int, str]:
    return substeps[substeps.index((number, kind)) - 1]


def _combiner(
    function: Callable[..., Any], edge: Edge, sort_values: bool
) -> Callable[[Any, Iterable[Any]], Iterable[Any]]:
    """``sort_values`` (SORT_VALUES): the combiner too gets each key's values sorted by their encoded form, as
    Hadoop's sort of the map's output by key and value gives them to it, and ``mrjob -r local``."""

    def combiner(key: Any, values: Iterable[Any]) -> Iterable[Any]:
        # (A key the combiner yields back is encoded as it was in the shuffle: hop requires a combiner keep it.)
        return edge.encode(function(*edge.decode_group(key, values, sort_values)))

    return combiner


def _reducer(
    function: Callable[..., Any], source: Edge, out: Edge, sort_values: bool
) -> Callable[[Any, Iterable[Any]], Iterable[Any]]:
    def reducer(key: Any, values: Iterable[Any]) -> Iterable[Any]:
        return out.encode(function(*source.decode_group(key, values, sort_values)))

    return reducer


def _hook(function: Callable[[], Any] | None, out: Edge | None) -> Callable[[], Iterable[Any]] | None:
    if function is None or out is None:
        return None
    return lambda: list(out.encode(function()))


def rewrite_output(output: str) -> None:
    """Turn hop's ``part-*`` files of an mrjob run (``json(line up to TAB) TAB json(rest)``) into the lines the
    job's OUTPUT_PROTOCOL wrote, each through a hidden copy renamed over it. A part that cannot be written (a full
    disk) raises :class:`OutputWriteError` naming it, its copy removed; the parts before it are rewritten, the
    rest not."""
    for part in sorted(Path(output).glob("part-*")):
        temporary = part.with_name(f".{part.name}.mrjob")
        try:
            with writing_output(part), open(part, encoding="utf-8") as source, open(temporary, "wb") as target:
                while batch := list(itertools.islice(source, _REWRITE_BATCH)):
                    # JSON escapes TAB and newline inside strings: the batch is one JSON array of [key, rest] pairs.
                    text = "".join(batch).rstrip("\n").replace("\t", ",").replace("\n", "],[")
                    target.writelines(line_of_output(key, rest) + b"\n" for key, rest in json.loads(f"[[{text}]]"))
            os.replace(temporary, part)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temporary)


def _unmark(output: str, report: dict[str, Any], reason: str) -> str:
    """Fail the finished job of ``output`` whose output cannot be made whole (``reason``): its parts removed, its
    ``_job.json`` (``report``, which said it succeeded) saying it failed and why, or removed if it cannot be
    written; returns ``reason``, with what became of ``_job.json`` if it is not there."""
    folder = Path(output)
    for part in folder.glob("part-*"):
        with contextlib.suppress(OSError):
            part.unlink()
    try:
        write_job_report(folder, {**report, "status": "failed", "error": reason})
    except OSError as error:
        with contextlib.suppress(OSError):
            (folder / JOB_REPORT).unlink()  # (it said the job succeeded)
        return f"{reason}; and {output_write_error(folder / JOB_REPORT, error)}: {output} has no _job.json"
    return reason
