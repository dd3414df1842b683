"""The same job on Spark: run an unchanged :class:`hop.Job` on PySpark, with hop's record semantics and output.

    python -m hop.spark_engine JOB.py INPUT... -o OUT [--reducers R] [--spark-master URL] [--spill-records N]
        [--overwrite] [--quiet]

(the command line lives in :mod:`hop.spark_cli`, which ``hop run --engine spark`` also uses; the code that runs
inside Spark's Python workers is :mod:`hop.spark_tasks`).

Contract of :func:`run_on_spark`:

- Records are read exactly as hop reads them: inputs are expanded and cut into splits by ``hop.inputs``
  (``expand_inputs``, ``hop.planning.plan_map_inputs``), each map task's splits (small files share one) are one
  Spark partition and each map task reads its splits with ``hop.inputs.iter_records``: text keys are byte offsets,
  jsonl/csv parse alike, compressed files work. Inputs and the output directory must be visible to every executor
  (as with hop on a cluster); relative paths are made absolute against the caller's working directory, as hop's
  engine makes them (``hop.inputs.absolute_inputs``), so ``self.input_file``, the errors naming a file and
  ``_job.json``'s ``inputs`` name the same paths on both engines.
- Each step of the job (``Job.resolved_steps()``; a multi-step job runs as chained stages, without intermediate
  files) is ``mapPartitions(map) -> combineByKey -> repartitionAndSortWithinPartitions -> mapPartitions(reduce)``,
  with combine and reduce resolved as ``hop.tasks.instantiate`` resolves them: the combiner (an aggregate
  reduce's own included) runs in the map task, per key, as hop's map buffer runs it; ``combineByKey`` then merges
  an aggregate reduce's states, or gathers lists (a hand-written reduce gets the combiner's output per map spill, as
  on hop, not one state per key). Keys go to
  ``num_reduces`` partitions by the job's ``partition`` (``partition_hash(key) % R`` with ``PYTHONHASHSEED=0`` in
  every Python worker: the same reducer as in hop), sorted within a partition by ``shuffle.keys.total_order_key``.
  A step's output reaches the next step's map as hop's ``output`` input format gives it (a JSON round trip).
- Output is hop's layout: ``OUT/part-NNNNN`` per reducer with ``json(key) TAB json(value)`` lines as hop's reduce
  writes them (written by the reduce tasks under ``OUT/_temporary``, renamed by the driver), then ``OUT/_job.json``
  (``engine: "spark"``, status, start/end, Spark start-up seconds, master URL, Spark version, counters), and
  ``OUT/_SUCCESS`` last. A non-empty ``OUT`` is refused unless ``overwrite``, which clears it. ``OUT`` removed,
  moved away or replaced while the run runs (its identity, ``hop.outputs.output_identity``, changed since the run
  began: during Spark's start-up too) fails the run with :class:`SparkJobFailed` as hop's engine words it
  (``hop.outputs.output_removed``); nothing is written under ``OUT``'s name then (no part, ``_job.json`` or
  ``_SUCCESS``), nothing makes ``OUT`` again, and the run's ``_temporary`` goes from ``OUT`` wherever it went.
- Counters: ``map_input_records``, ``map_output_records``, ``reduce_output_records`` and the user counters, summed
  with accumulators. As in hop's report of a multi-step job, the top level holds the last step's engine counters
  with the user counters summed over every step, and ``"steps"`` the earlier steps' own. Spark applies a successful
  task's accumulator updates once, but a stage re-run after a lost executor counts again (hop counts committed
  attempts only).
- Errors: bad arguments or inputs raise ``ValueError`` (``OutputExistsError``, ``InputError``) before Spark starts;
  PySpark or Java missing, or a session that cannot start, raise :class:`SparkUnavailable`; a failed Spark job
  (an error in user code or an undecodable input record included) raises :class:`SparkJobFailed` with the user's
  traceback and the record, after writing ``_job.json`` with status ``failed`` (and no ``_SUCCESS``). Spark's own
  log lines that repeat such a failure (stack traces quoting it, the aborted-job line) are not printed
  (:func:`log4j2_config`), so the caller's report of it is the one; the JVM's stderr reaches the caller's stderr
  through :mod:`hop.spark_gateway` (without its incubator-module warning), all of it written out before
  :func:`run_on_spark` returns or raises. The SparkSession is stopped in every case; the JVM stays up for the
  next run in this process until :func:`shutdown_jvm` (each session sets its logging anew).

Limits: the reduce side sorts with PySpark's external sorter, which spills, but a key's values are one list.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hop.counters import total_user_counters
from hop.inputs import DEFAULT_SPLIT_BYTES, Split, absolute_inputs, expand_inputs
from hop.job import INPUT_FORMATS, Job
from hop.jobspec import dump_job_class
from hop.lifetime import SAME_SIGNAL_SECONDS, Interrupted, stop_signals_taken
from hop.outputs import check_output, output_changed, output_identity, output_removed, prepare_output, write_job_report
from hop.planning import plan_map_inputs
from hop.spark_gateway import (
    close_jvm_stderr,
    flush_jvm_stderr,
    java_option_word,
    java_problem,
    launch_gateway,
    remove_jvm_scratch,
    stderr_reader_watched,
)
from hop.spark_master import LOCAL_MASTER, malformed_master, unreachable_master
from hop.spark_tasks import (
    FAILURE_OPEN,
    AggregateFold,
    CounterParam,
    ListFold,
    StepCounters,
    StepPlan,
    failed_step,
    failure_of,
    map_task,
    partition_function,
    reduce_task,
    resolve_step,
    total_order,
    write_task,
)
from hop.spilldirs import make_marked_dir
from hop.stdin_input import STDIN_COPY_OPTION, inputs_as_given
from shuffle.buffer import DEFAULT_SPILL_RECORDS

if TYPE_CHECKING:
    from pyspark import RDD, SparkContext
    from pyspark.sql import SparkSession

_PROJECT_ROOT = str(Path(__file__).resolve().parent.parent)
_LOG4J2 = """\
rootLogger.level = {level}
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{{yy/MM/dd HH:mm:ss}} %p %c{{1}}: %m%n%ex
appender.console.filter.repeats.type = RegexFilter
appender.console.filter.repeats.regex = {repeats}
appender.console.filter.repeats.onMatch = DENY
appender.console.filter.repeats.onMismatch = NEUTRAL
# The executor logs a failed task's exception with its stack trace; the driver gets the same error.
logger.executor.name = org.apache.spark.executor.Executor
logger.executor.level = fatal
# Hadoop's notice, on every start, that it uses its Java code for a native library Spark does not need here.
logger.nativecode.name = org.apache.hadoop.util.NativeCodeLoader
logger.nativecode.level = error
# PySpark's gateway logger: Spark announces a "default log level" on start-up unless it matches the root level.
logger.repl.name = org.apache.spark.api.python.PythonGatewayServer
logger.repl.level = {level}
"""
# Spark's log lines that repeat a failed task's error, which the driver reports with the user's traceback and record
# (a Java regex matched against the whole message): the scheduler's "Lost task" quoting hop's task failure (with the
# whole Python worker traceback), and its "Task 0 in stage 0.0 failed 1 times; aborting job", which says less than
# the report after it: the job's error quotes it ("Job aborted due to stage failure: Task 0 in stage 0.0 failed 1
# times, most recent failure: ..."), and the run prints that error whole where it is not the user's. A lost task
# that is not hop's failure (an executor lost) is still logged, and so is any other ERROR line.
_TASK_FAILURE_LINES = f".*{FAILURE_OPEN.strip()}.*"
_ABORT_LINES = r"Task \S+ in stage \S+ failed \d+ times?; aborting job.*"
# The block manager's error, with a Java stack trace, when its shuffle folder could not be deleted as the session
# stopped: a cancelled job's task (Ctrl-C) still wrote a file there. Nothing is left by it: the whole temporary
# directory of the run's JVM is removed once the JVM has ended (``hop.spark_gateway.remove_jvm_scratch``).
_SCRATCH_DELETE_LINES = r"Exception while deleting local spark dir: .*"


def log4j2_config(quiet: bool) -> str:
    """The log4j2 properties of the driver JVM: Spark's log at WARN (``quiet``: at ERROR), without the lines that
    repeat a failed task's error or the job's abort, which the driver reports itself (:func:`run_on_spark`), nor the
    block manager's failure to delete a folder the run's own clean-up removes."""
    dropped = [_TASK_FAILURE_LINES, _ABORT_LINES, _SCRATCH_DELETE_LINES]
    repeats = "(?s)" + "|".join(dropped)
    # (backslashes doubled: a properties file reads "\\S" as "S")
    return _LOG4J2.format(level="error" if quiet else "warn", repeats=repeats.replace("\\", "\\\\"))


class SparkUnavailable(RuntimeError):
    """Spark cannot run here: PySpark or Java is missing, or the session did not start."""


class SparkInterrupted(KeyboardInterrupt):
    """The run was stopped by a signal (``signum``: Ctrl-C's SIGINT or SIGTERM; SIGPIPE for the reader of its
    messages gone) after cancelling its Spark job."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@contextlib.contextmanager
def _cancelled_on_signal(sc: SparkContext) -> Iterator[list[int]]:
    """While inside, Ctrl-C or SIGTERM cancels the context's jobs, from another thread, and is noted in the list
    yielded (the caller raises :class:`SparkInterrupted` once its action has returned); a second one raises it at
    once, but not one within :data:`~hop.lifetime.SAME_SIGNAL_SECONDS` of the first: that is the first delivered
    again (coreutils ``timeout -s INT`` sends it to the run, then to its process group), which raised at once too,
    so the run ended with no ``_job.json`` (its output folder removed, as one the run had made and left empty) and
    the cancelling thread's call into the stopped context printed a page of Java stack. PySpark's own Ctrl-C
    handler cancels them from the signal handler, inside the py4j call the main thread is waiting in: that call
    fails reentrant, and py4j logs both failures with their tracebacks (47 lines before "interrupted"). Outside the
    main thread (which alone gets signals) it does nothing.

    The reader of the run's messages gone (``hop run ... 2>&1 | head -1``), found as the JVM writes its next line
    or progress bar (:func:`hop.spark_gateway.stderr_reader_watched`), cancels them too, noted as SIGPIPE, as
    ``hop.closed_output`` makes hop's engine take it: the job ran on to its end, for nobody (its writes were
    dropped), since the main thread, waiting in the job's call, writes nothing that would find the reader gone."""
    signalled: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield signalled
        return

    def cancel() -> None:
        threading.Thread(target=_cancel_jobs, args=(sc,), name="cancel Spark jobs", daemon=True).start()

    first: list[float] = []  # (monotonic)

    def on_signal(signum: int, frame: object) -> None:
        if first and time.monotonic() - first[0] < SAME_SIGNAL_SECONDS:
            return  # (the first one delivered again: the jobs are being cancelled already)
        first.append(time.monotonic())
        signalled.append(signum)
        if len(signalled) > 1:
            raise SparkInterrupted(signalled[0])
        cancel()

    def on_reader_gone() -> None:
        if not signalled:
            signalled.append(signal.SIGPIPE)
            cancel()

    previous = {number: signal.signal(number, on_signal) for number in stop_signals_taken()}
    try:
        with stderr_reader_watched(on_reader_gone):
            yield signalled
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


def _cancel_jobs(sc: SparkContext) -> None:
    """Cancel the context's jobs. The run is being stopped, so two loggers of Spark's internal errors are silenced
    first, each of which a killed task can make log a Java stack on the user's terminal:

    - a task killed so may fail to release its broadcast's lock in a local executor ("Error in
      TaskCompletionListener ... Block broadcast_0 does not exist");
    - its last status may reach the scheduler after the session's stop ended the pool that takes it ("Exception in
      statusUpdate ... RejectedExecutionException"): the wait for the executors' tasks to end
      (:func:`_await_tasks_ended`) reads a status store that can lag the task's start, so it may not wait."""
    with contextlib.suppress(Exception):  # (the silence is cosmetic: the jobs are cancelled either way)
        jvm: Any = sc._jvm
        log4j = jvm.org.apache.logging.log4j
        for logger in ("org.apache.spark.TaskContextImpl", "org.apache.spark.scheduler.TaskSchedulerImpl"):
            log4j.core.config.Configurator.setLevel(logger, log4j.Level.OFF)
    # A second Ctrl-C ends the run at once, stopping the context this thread may not have reached yet: its call then
    # fails ("Cannot call methods on a stopped SparkContext"), with nothing left to cancel.
    with contextlib.suppress(Exception):
        sc.cancelAllJobs()


class SparkJobFailed(RuntimeError):
    """The Spark job failed. ``str()`` is a one-line reason; ``user_traceback`` the user's traceback if known;
    ``step`` names the step that failed in a job of several (``"step 2/3"``, as ``hop.runner.JobFailed`` names it),
    else is ``None`` (one step, or a failure Spark reported without saying where)."""

    def __init__(
        self, reason: str, user_traceback: str | None, report: dict[str, Any], step: str | None = None
    ) -> None:
        super().__init__(reason)
        self.user_traceback = user_traceback
        self.report = report
        self.step = step


@contextlib.contextmanager
def _environment(variables: Mapping[str, str]) -> Iterator[None]:
    saved = {name: os.environ.get(name) for name in variables}
    os.environ.update(variables)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _is_loopback_master(master: str) -> bool:
    return master.startswith("local") or bool(re.match(r"spark://(127\.\d+\.\d+\.\d+|localhost)(:\d+)?$", master))


def _splits_of(task: list[Split]) -> list[Split]:
    return task


def _local_cores(master: str) -> int:
    """The cores of a ``local``, ``local[N]`` or ``local[*]`` master; 1 for other masters (splits stay
    ``split_size``)."""
    match = LOCAL_MASTER.fullmatch(master)
    if match is None:
        return 1
    cores = match.group("threads") or "1"
    return (os.cpu_count() or 1) if cores == "*" else int(cores)


PY4J_LOGGERS = ("root", "py4j.java_gateway", "py4j.clientserver")
"""Where py4j logs errors with their tracebacks (on stderr, the root logger getting a handler from its first
``logging.exception``)."""


def _not_about_an_interrupt(record: logging.LogRecord) -> bool:
    """False for a record whose exception is, or arose while handling, Ctrl-C or SIGTERM (a KeyboardInterrupt):
    py4j logs "KeyboardInterrupt while sending command." and then the failures of closing the interrupted
    connection, 15 to 40 lines, when a run is stopped while its main thread waits in a call into the JVM (for
    seconds during a session's start-up). The run says "interrupted" itself (hop.spark_cli)."""
    error = record.exc_info[1] if record.exc_info else None
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, KeyboardInterrupt):
            return False
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return True


def _not_about_an_ended_jvm(record: logging.LogRecord) -> bool:
    """False for a record of a lost connection to the driver JVM once that JVM has ended: py4j logs "Exception
    while sending command." with 20 lines of tracebacks when the JVM is killed during a call (the kernel's
    out-of-memory killer does so), and the run says how the JVM ended itself (:func:`_jvm_end`)."""
    from py4j.protocol import Py4JNetworkError

    error = record.exc_info[1] if record.exc_info else None
    return not isinstance(error, Py4JNetworkError) or _jvm_end(JVM_END_SECONDS) is None


def _quiet_py4j_logs() -> None:
    for name in PY4J_LOGGERS:
        logger = logging.getLogger(None if name == "root" else name)
        for check in (_not_about_an_interrupt, _not_about_an_ended_jvm):
            if check not in logger.filters:
                logger.addFilter(check)


def start_session(master: str, app_name: str, *, quiet: bool, conf: Mapping[str, str] | None = None) -> SparkSession:
    """A new SparkSession on ``master`` set up for hop jobs (a ``spark.master`` in ``conf`` is the master instead, as
    Spark takes it); raises :class:`SparkUnavailable` if it cannot start."""
    try:
        from pyspark import SparkConf, SparkContext
        from pyspark.sql import SparkSession
    except ImportError as error:
        raise SparkUnavailable(f"PySpark is not installed ({error}); pip install 'hop[spark]'") from None
    java = java_problem()
    if java is not None:
        raise SparkUnavailable(java)
    if SparkContext._active_spark_context is not None:
        raise SparkUnavailable("a SparkContext is already running in this process; stop it first")
    master = (conf or {}).get("spark.master", master)  # (its driver binds to the loopback for a loopback master)
    # (before the JVM: Spark would retry an unreachable master for a minute and then fail naming neither it nor a fix)
    try:  # (and a malformed URL: hop's command lines refuse one before this, a library caller's is refused here)
        unreachable = malformed_master(master) or unreachable_master(master)
    except ValueError as error:
        unreachable = str(error)
    if unreachable is not None:
        raise SparkUnavailable(unreachable)
    settings = {
        "spark.pyspark.python": sys.executable,
        "spark.pyspark.driver.python": sys.executable,
        "spark.executorEnv.PYTHONHASHSEED": "0",
        "spark.executorEnv.PYTHONPATH": _PROJECT_ROOT,
        # PySpark starts its Python workers as ``python -m pyspark.daemon`` in the driver's current directory, which
        # ``-m`` puts first on their path: a json.py there replaced the standard library's and every task failed (a
        # page of Java stack traces ending "module 'json' has no attribute 'loads'"). Python 3.11's -P, as an
        # environment variable: a job's own modules travel with it (hop.jobspec), none is read from there.
        "spark.executorEnv.PYTHONSAFEPATH": "1",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false" if quiet else "true",
    }
    environment = {"PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable, "PYTHONHASHSEED": "0"}
    extra_options = (conf or {}).get("spark.driver.extraJavaOptions", "")
    log_config: Path | None = None
    if "log4j2.configurationFile" in extra_options:
        if quiet:  # the caller's own logging: only its level is ours to set
            settings["spark.log.level"] = "ERROR"
    else:
        # Read by the driver JVM when it starts; a JVM already running for this process is reconfigured below.
        log_config = write_log_config(quiet)
    if _is_loopback_master(master):
        settings["spark.driver.host"] = settings["spark.driver.bindAddress"] = "127.0.0.1"
        environment["SPARK_LOCAL_IP"] = "127.0.0.1"
    settings.update(conf or {})
    if log_config is not None:  # (after the caller's options, which it extends)
        ours = f"-Dlog4j2.configurationFile=file:{java_option_word(str(log_config))}"  # (a TMPDIR with spaces)
        settings["spark.driver.extraJavaOptions"] = f"{extra_options} {ours}".strip()
    settings = {"spark.master": master, "spark.app.name": app_name, **settings}
    builder = SparkSession.builder
    for name, value in settings.items():
        builder = builder.config(name, value)
    jvm_running = SparkContext._gateway is not None
    _quiet_py4j_logs()
    # PySpark's context sets a SIGINT handler that cancels the jobs from inside the call into the JVM the main thread
    # waits in: that call fails reentrant and py4j logs both failures. The caller's handler is put back.
    in_main = threading.current_thread() is threading.main_thread()
    sigint_handler = signal.getsignal(signal.SIGINT) if in_main else None
    try:
        try:
            with _environment(environment):
                # The context first, on a JVM whose stderr hop filters (hop.spark_gateway); the builder reuses it.
                context_conf = SparkConf().setAll(list(settings.items()))
                SparkContext(conf=context_conf, gateway=None if jvm_running else launch_gateway(context_conf))
                if sigint_handler is not None:  # (before the session's calls)
                    signal.signal(signal.SIGINT, sigint_handler)
                spark = builder.getOrCreate()
        except Exception as error:
            flush_jvm_stderr()  # (the JVM's own account first)
            raise SparkUnavailable(f"Spark did not start on master {master}: {_first_line(error)}") from error
        if log_config is not None and jvm_running:
            try:
                _reconfigure_logging(spark, log_config)
            except Exception as error:
                stop_session(spark)
                raise SparkUnavailable(f"Spark's logging could not be set up: {_first_line(error)}") from error
    finally:
        if log_config is not None:
            shutil.rmtree(log_config.parent, ignore_errors=True)
        if sigint_handler is not None:
            signal.signal(signal.SIGINT, sigint_handler)
    return spark


LOG_CONFIG_PREFIX = "hop-spark-log4j2-"
"""The name of the folder of the driver's logging configuration, in the system's temporary directory, up to its
random part."""


def write_log_config(quiet: bool) -> Path:
    """The driver's logging configuration (:func:`log4j2_config`), written to a new file in a folder of its own,
    marked as this process's (``hop.spilldirs``): the caller removes the folder once the driver started; one that a
    process killed meanwhile (-9) left behind is removed by the next call on this host."""
    folder = make_marked_dir(None, LOG_CONFIG_PREFIX)
    path = folder / "log4j2.properties"
    try:
        path.write_text(log4j2_config(quiet), encoding="utf-8")
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    return path


def _reconfigure_logging(spark: SparkSession, config: Path) -> None:
    """Load ``config`` into the log4j2 of a driver JVM started by an earlier session (with the other mode's)."""
    jvm: Any = spark.sparkContext._jvm
    jvm.org.apache.logging.log4j.core.config.Configurator.reconfigure(jvm.java.net.URI(config.as_uri()))


def shutdown_jvm() -> None:
    """End the JVM that PySpark launched for this process, if any, and wait for it (so its CPU time is accounted to
    this process), then remove its temporary directory (``hop.spark_gateway``); the next session starts a new one."""
    try:
        from pyspark import SparkContext
    except ImportError:
        return
    gateway = SparkContext._gateway
    if gateway is None or SparkContext._active_spark_context is not None:
        return
    process: subprocess.Popen[bytes] | None = getattr(gateway, "proc", None)
    with contextlib.suppress(Exception):
        gateway.shutdown()
    SparkContext._gateway = None
    SparkContext._jvm = None
    if process is not None:
        if process.stdin is not None:
            process.stdin.close()  # the gateway JVM exits when its stdin closes
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    close_jvm_stderr()
    remove_jvm_scratch()  # (its temporary directory: shuffle files and Spark's folders a killed JVM left there)


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def _resolve_format(job_class: type[Job], input_format: str | None) -> str:
    chosen = input_format or job_class.input_format
    if chosen not in INPUT_FORMATS:
        raise ValueError(f"input format must be one of {INPUT_FORMATS}, got {chosen!r}")
    return chosen


@dataclass
class _Run:
    """Driver-side state of one run, turned into ``_job.json``."""

    job_class: type[Job]
    inputs: list[str]
    output: Path
    master: str
    num_reduces: int
    num_maps: int
    spill_records: int
    start: float = field(default_factory=time.time)
    startup_seconds: float | None = None
    app_id: str | None = None
    spark_version: str | None = None
    step_counters: list[StepCounters] = field(default_factory=list)
    step_maps: list[int] = field(default_factory=list)
    traceback: str | None = None
    """The user's traceback of a failed run (as hop's engine reports it), or Spark's error when it names none."""

    def report(self, status: str, error: str | None, failed_step: int | None = None) -> dict[str, Any]:
        """``_job.json``; a run that failed in ``failed_step`` (from 0) reports that step as hop's engine does: its
        counters at the top level, the steps before it in ``"steps"`` (not the steps planned after it)."""
        ended = len(self.step_counters) if failed_step is None else failed_step + 1
        steps = [
            {
                "step": number,
                "num_maps": maps,
                "num_reduces": self.num_reduces,
                "counters": self._counters(counters),
            }
            for number, (maps, counters) in enumerate(
                zip(self.step_maps[:ended], self.step_counters[:ended], strict=True)
            )
        ]
        end = time.time()
        report: dict[str, Any] = {
            "engine": "spark",
            "job_id": self.app_id,
            "name": self.job_class.__name__,
            "status": status,
            "error": error,
            "traceback": self.traceback,
            "master": self.master,
            "spark_version": self.spark_version,
            "inputs": self.inputs,
            "start": self.start,
            "end": end,
            "spark_startup_seconds": self.startup_seconds,
            "run_seconds": None if self.startup_seconds is None else end - self.start - self.startup_seconds,
            "num_steps": max(1, len(self.step_counters)),
            "step": max(0, len(steps) - 1),
            "num_maps": steps[-1]["num_maps"] if steps else self.num_maps,
            "num_reduces": self.num_reduces,
            "counters": steps[-1]["counters"] if steps else self._counters(None),
        }
        if len(steps) > 1:
            report["steps"] = steps[:-1]
            # The run's user counters, summed over its steps, as on hop (hop.runner): the engine's stay the last step's.
            user = total_user_counters(counters.user.value for counters in self.step_counters[:ended])
            report["counters"] = {**report["counters"], "user": user}
        return report

    @staticmethod
    def _counters(counters: StepCounters | None) -> dict[str, Any]:
        names = ("map_input_records", "map_output_records", "reduce_output_records")
        builtin = counters.builtin.value if counters is not None else {}
        user = counters.user.value if counters is not None else {}
        return {**{name: builtin.get(name, 0) for name in names}, "user": user}

    def write(self, status: str, error: str | None, failed_step: int | None = None) -> dict[str, Any]:
        report = self.report(status, error, failed_step)
        write_job_report(self.output, report)
        return report


def _plan_step(
    sc: SparkContext,
    run: _Run,
    job_class: type[Job],
    job_code: bytes,
    number: int,
    source: RDD[Any],
    fmt: str,
    num_maps: int,
) -> RDD[str]:
    """The lines RDD of one step, fed by ``source`` (``num_maps`` splits, or the previous step's lines)."""
    param: Any = CounterParam()  # duck-typed as Spark's AccumulatorParam
    counters = StepCounters(sc.accumulator({}, param), sc.accumulator({}, param))
    run.step_counters.append(counters)
    run.step_maps.append(num_maps)
    plan = StepPlan(job_code, number, run.num_reduces, fmt, run.spill_records)
    aggregate = resolve_step(job_class(), number).aggregate
    fold: Any = AggregateFold(aggregate, number) if aggregate is not None else ListFold
    partitioner = partition_function(job_class, job_code, run.num_reduces, number)
    mapped = source.mapPartitions(partial(map_task, plan, counters))
    combined = mapped.combineByKey(fold.create, fold.add, fold.merge, run.num_reduces, partitioner)
    ordered = combined.repartitionAndSortWithinPartitions(
        run.num_reduces, partitioner, True, partial(total_order, step=number)
    )
    return ordered.mapPartitions(partial(reduce_task, plan, counters))


def _clear_progress_bar(sc: SparkContext) -> None:
    """Clear Spark's console progress bar, which a failed job leaves on the terminal's last line (Spark clears it
    after a job that succeeds): the failure's report would start at the end of the bar."""
    with contextlib.suppress(Exception):  # (a bar left on screen is cosmetic)
        bar = sc._jsc.sc().progressBar()
        if bar.isDefined():
            bar.get().finishAll()


def _await_tasks_ended(sc: SparkContext, deadline: float) -> None:
    """Wait until no task runs on the executors, or ``deadline`` (monotonic): a cancelled job's action returns while
    its tasks are still being killed, and stopping the session under them logs an executor's internal error with
    its stack ("Error in TaskCompletionListener ... Block broadcast_0 does not exist")."""
    with contextlib.suppress(Exception):  # (the wait is cosmetic: the session is stopped either way)
        store: Any = sc._jsc.sc().statusStore()
        while time.monotonic() < deadline:
            executors = store.executorList(True)
            if all(executors.apply(i).activeTasks() == 0 for i in range(executors.size())):
                return
            time.sleep(0.1)


def _failure(error: BaseException) -> tuple[str, str | None]:
    """The one-line reason and the traceback to show of a failed Spark action: a task's failure's own (the user's,
    or none when the engine found bad input or output), the driver JVM's end when the connection to it failed
    because it ended (the traceback of the lost connection says nothing more), else Spark's whole error."""
    failure = failure_of(error)
    if failure is not None:
        return failure
    from py4j.protocol import Py4JNetworkError

    if isinstance(error, OSError | Py4JNetworkError) and (ended := _jvm_end(JVM_END_SECONDS)) is not None:
        return (
            f"Spark's driver JVM {ended} during the job: if the kernel's out-of-memory killer ended it (`dmesg` "
            "says so), run with fewer --workers, or where more memory is free",
            None,
        )
    return f"Spark job failed: {_first_line(error)}", str(error)


JVM_END_SECONDS = 2.0
"""How long a run whose connection to the driver JVM failed waits for the JVM's exit to show (it closes its sockets
as it exits)."""


def _jvm_end(timeout: float) -> str | None:
    """How the driver JVM launched for this process ended ("was killed by SIGKILL", "exited with code 1"), waiting
    up to ``timeout`` seconds for it to; None if it still runs, or none was launched here."""
    from pyspark import SparkContext

    process: subprocess.Popen[bytes] | None = getattr(SparkContext._gateway, "proc", None)
    if process is None:
        return None
    try:
        code = process.wait(timeout)
    except subprocess.TimeoutExpired:
        return None
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"was killed by {signal.Signals(-code).name}"
    return f"exited with code {code}"


def stop_session(spark: SparkSession) -> None:
    """Stop ``spark``; with a driver JVM that has ended, forget the session and context PySpark keeps instead
    (stopping them calls into the JVM: the lost connection's traceback hid the run's report), so that
    :func:`shutdown_jvm` ends what is left of the JVM.

    PySpark's own stop waits for its accumulator server, whose one thread polls the JVM's connection once a second
    before it sees the shutdown: about a second of every run, after its output was written. That server is shut
    down in a thread of its own instead, once the context has stopped (the next context starts a server of its
    own). Its connection from the JVM then ends as the JVM does (:func:`shutdown_jvm`), often before the server's
    thread has seen the shutdown: it reads the end of the connection as an update cut short and printed an
    ``EOFError`` traceback (20 lines, as a successful run ended); its errors are dropped from the stop on."""
    sc: Any = spark.sparkContext
    server, sc._accumulatorServer = sc._accumulatorServer, None
    if server is not None:
        server.handle_error = _ignore_request_error
    try:
        if _jvm_end(0) is None:
            spark.stop()
            return
        from pyspark import SparkContext
        from pyspark.sql import SparkSession

        sc._jsc = None
        SparkContext._active_spark_context = None
        SparkSession._instantiatedSession = SparkSession._activeSession = None
    finally:
        if server is not None:
            threading.Thread(target=_shut_down, args=(server,), name="hop-accumulator-server-stop", daemon=True).start()


INTERRUPTED_STOP_SECONDS = 10.0
"""How long :func:`stop_interrupted_session` waits for its cancelling calls into the JVM before it stops anyway."""


def stop_interrupted_session(spark: SparkSession) -> None:
    """Stop ``spark`` as a command that was interrupted (Ctrl-C, SIGTERM) while a Spark job of its ran: Spark's
    logging turned off and the job cancelled first, from another thread (the main thread's connection to the JVM may
    have been cut mid-call by the interruption), then :func:`stop_session`, PySpark's warning that the JVM did not
    stop cleanly dropped. Stopped as it was, the session's job aborted under the user's "interrupted" with an
    ``ERROR FileFormatWriter: Aborting job`` and a page of Java stack, or PySpark warned "Unable to cleanly shutdown
    Spark JVM process" (``hop view --compact`` sent SIGTERM). Nothing of them is the user's: the run was stopped."""
    sc: Any = spark.sparkContext

    def cancel() -> None:
        with contextlib.suppress(Exception):
            log4j = sc._jvm.org.apache.logging.log4j
            log4j.core.config.Configurator.setRootLevel(log4j.Level.OFF)
        with contextlib.suppress(Exception):
            sc.cancelAllJobs()

    canceller = threading.Thread(target=cancel, name="cancel interrupted Spark jobs", daemon=True)
    canceller.start()
    canceller.join(INTERRUPTED_STOP_SECONDS)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Unable to cleanly shutdown Spark JVM process", RuntimeWarning)
        stop_session(spark)


def _ignore_request_error(request: object, client_address: object) -> None:
    """A stopped session's accumulator server's ``handle_error``: what its connection from the JVM does as the JVM
    ends is no error of the run's."""


def _shut_down(server: Any) -> None:
    """Shut PySpark's accumulator ``server`` down (a Python thread and socket of the driver's, nothing of the JVM's)."""
    with contextlib.suppress(Exception):
        server.shutdown()


class _OutputFolder:
    """The run's output directory ``OUT``, once prepared: its identity (``hop.outputs.output_identity``), to tell it
    was removed or moved away while the job ran, and an open descriptor of it, which finds the run's
    ``OUT/_temporary`` wherever ``OUT`` went. ``_temporary`` is made here, with ``OUT`` present: the reduce tasks
    write into it and make nothing (:func:`hop.spark_tasks.write_task`), so that nothing brings a removed ``OUT``
    back, nor writes into a folder made under its name since."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.identity = output_identity(path)
        (path / "_temporary").mkdir(exist_ok=True)
        self.descriptor = os.open(path, os.O_RDONLY | os.O_DIRECTORY)

    def removed(self) -> bool:
        """Whether ``OUT`` was removed or moved away since it was prepared: it is gone, or another directory has its
        name. What was written there went with it: nothing more may be written under its name."""
        return output_changed(self.path, self.identity)

    def remove_temporary(self) -> None:
        """Remove the run's ``OUT/_temporary``, in ``OUT`` wherever it went (not in a folder that took its name)."""
        shutil.rmtree("_temporary", ignore_errors=True, dir_fd=self.descriptor)

    def close(self) -> None:
        os.close(self.descriptor)


def _removed_output_failure(run: _Run) -> SparkJobFailed:
    """The failure of a run whose ``OUT`` was removed or moved away while it ran, as hop's engine words it
    (``hop.outputs.output_removed``); its report is not written, since ``OUT`` is not there to hold it."""
    reason = output_removed(run.output)
    return SparkJobFailed(reason, None, run.report("failed", reason))


def run_on_spark(
    job_class: type[Job],
    inputs: list[str],
    output: str,
    *,
    num_reduces: int,
    master: str = "local[2]",
    input_format: str | None = None,
    overwrite: bool = False,
    split_size: int = DEFAULT_SPLIT_BYTES,
    spill_records: int = DEFAULT_SPILL_RECORDS,
    quiet: bool = True,
    conf: Mapping[str, str] | None = None,
    stdin_copy: str | None = None,
) -> dict[str, Any]:
    """Run ``job_class`` on Spark over ``inputs`` into ``output``; return the ``_job.json`` report.

    ``stdin_copy``: the input that is standard input's copy (``hop.stdin_input``), named ``-`` in the report.

    ``split_size`` and ``spill_records`` are ``hop run``'s ``--split-size`` and ``--spill-records``: the same map
    tasks read the same splits and combine where hop's would spill. ``conf`` adds Spark settings
    (``spark.executor.memory`` ...); a ``spark.master`` there is the run's master instead of ``master``, for the
    splits and the report as for the session. ``quiet`` turns Spark's console progress and its logs below ERROR
    off. See the module docstring for the semantics and the errors raised.
    """
    master = (conf or {}).get("spark.master", master)
    if num_reduces < 1:
        raise ValueError(f"a job needs at least one reducer, got {num_reduces}")
    if spill_records < 1:
        raise ValueError(f"spill records must be positive, got {spill_records}")
    fmt = _resolve_format(job_class, input_format)
    num_steps = len(job_class().resolved_steps())
    # As hop's engine takes them (hop.runner.build_spec): executors read absolute paths (their working directory is
    # not ours), and the job, its errors and the report name the files alike on both engines.
    inputs = absolute_inputs(inputs)
    stdin_copy = os.path.abspath(stdin_copy) if stdin_copy else None
    out = Path(output).resolve()
    check_output(str(out), overwrite, inputs)
    # Cut the input as hop's coordinator would for as many map slots as Spark has cores (same splits packed into the
    # same map tasks, same counters).
    plan = plan_map_inputs(expand_inputs(list(inputs), str(out)), split_size, slots=_local_cores(master))
    tasks = [[chunk.split for chunk in task] for task in plan]
    job_code = dump_job_class(job_class)
    given = inputs_as_given(inputs, {STDIN_COPY_OPTION: stdin_copy})
    run = _Run(job_class, given, out, master, num_reduces, len(tasks), spill_records)
    claimed = output_identity(out)  # (hop run has made it: hop.outputs.claim_output)
    spark = start_session(master, f"hop {job_class.__name__}", quiet=quiet, conf=conf)
    folder: _OutputFolder | None = None
    try:
        sc = spark.sparkContext
        run.startup_seconds = time.time() - run.start
        run.app_id, run.spark_version = sc.applicationId, sc.version
        if claimed is not None and output_identity(out) != claimed:
            # Taken away while Spark started (seconds): not made again, nor a folder made under its name since
            # cleared by --overwrite and written.
            raise _removed_output_failure(run)
        prepare_output(str(out), overwrite, inputs)
        folder = _OutputFolder(out)
        # One partition per map task; flatMap keeps the partitions, so a task's splits stay together.
        lines: RDD[Any] = sc.parallelize(tasks, max(1, len(tasks))).flatMap(_splits_of)
        for number in range(num_steps):
            first = number == 0
            maps = len(tasks) if first else num_reduces
            lines = _plan_step(sc, run, job_class, job_code, number, lines, fmt if first else "lines", maps)
        try:
            with _cancelled_on_signal(sc) as signalled:
                try:
                    written = lines.mapPartitionsWithIndex(partial(write_task, str(out))).collect()
                    failure = None
                except Exception as error:
                    failure = error
                if failure is not None or signalled:
                    if not quiet:
                        _clear_progress_bar(sc)
                    folder.remove_temporary()
        except SparkInterrupted as stopped:
            # A second Ctrl-C or SIGTERM ends the run now, not waiting for the cancelled tasks to end; it is reported
            # as the first one is (it ended the run with no _job.json, and the output folder, left empty, removed).
            folder.remove_temporary()
            if not folder.removed():
                run.write("failed", Interrupted(stopped.signum, "hop run").cancel_reason())
            raise
        if signalled:  # (the job was cancelled, or ended meanwhile: either way the run was stopped)
            if not folder.removed():  # (else there is no OUT to hold the report: the run was stopped anyway)
                # As hop's engine reports a batch job a Ctrl-C or SIGTERM cancelled (README: Spark). Written before
                # the wait for its tasks, which a second one ends.
                run.write("failed", Interrupted(signalled[0], "hop run").cancel_reason())
            _await_tasks_ended(sc, time.monotonic() + 10)
            raise SparkInterrupted(signalled[0])
        if folder.removed():  # (a reduce task that found no OUT/_temporary failed the job for it)
            raise _removed_output_failure(run)
        if failure is not None:
            reason, user_traceback = _failure(failure)
            step, run.traceback = failed_step(failure), user_traceback
            report = run.write("failed", reason, step)
            label = f"step {step + 1}/{num_steps}" if step is not None and num_steps > 1 else None
            raise SparkJobFailed(reason, user_traceback, report, label) from None
        if sorted(index for index, _ in written) != list(range(num_reduces)):
            raise RuntimeError(f"Spark returned the outputs of partitions {sorted(i for i, _ in written)}")
        for index, path in written:
            try:
                os.replace(path, out / f"part-{index:05d}")
            except OSError:
                if folder.removed():  # (since the check above)
                    raise _removed_output_failure(run) from None
                raise
        folder.remove_temporary()
        if folder.removed():  # (the parts committed went with it: nothing is marked done under its name)
            raise _removed_output_failure(run)
        report = run.write("succeeded", None)
        (out / "_SUCCESS").touch()
        return report
    finally:
        if folder is not None:
            folder.remove_temporary()  # (a run ended by an unforeseen error too)
            folder.close()
        stop_session(spark)
        flush_jvm_stderr()  # (before the caller's report of the run)


if __name__ == "__main__":
    from hop.spark_cli import main

    sys.exit(main())
