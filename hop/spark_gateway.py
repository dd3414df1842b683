"""PySpark's driver JVM, launched with its stderr passed through a filter that drops one meaningless line.

Spark 4's launcher starts the driver JVM with ``--add-modules=jdk.incubator.vector``, and the JVM answers that, on
every start and before any logging is set up, with ``WARNING: Using incubator modules: jdk.incubator.vector`` on
stderr; no JVM or Spark option turns the line off. :func:`launch_gateway` therefore starts the JVM through
PySpark's public ``pyspark.java_gateway.launch_gateway(conf, popen_kwargs)`` with its stderr on a pipe that a
thread of this process reads: that exact line is dropped, every other byte (Spark's log, the JVM's own errors, the
stderr of the Python workers the JVM starts) is written on to this process's stderr (file descriptor 2, where the
JVM would have written it) as it arrives, partial lines and progress bars included.

Contract:

- :func:`launch_gateway` returns the gateway to pass to ``SparkContext(gateway=...)``; if PySpark cannot launch
  the JVM it raises PySpark's error after everything the JVM printed has been written out.
- The JVM's lines reach stderr asynchronously; :func:`flush_jvm_stderr` writes out everything the JVM has written
  so far, so a caller that has just got an answer from the JVM (a job failed) can print its own report after the
  JVM's lines, as it could when the JVM wrote to stderr itself.
- :func:`close_jvm_stderr` waits (bounded) for the pipe of a JVM that has ended and forwards what is left; the
  thread ends once every writer has closed the pipe (Python workers the JVM started hold it too).
- :func:`stderr_reader_watched` tells its caller when the JVM's lines find the reader of this process's stderr
  gone (``hop run ... 2>&1 | head -1``): every write to it fails then, and is dropped.
- :func:`java_problem` says why no JVM can be launched here (no Java, a ``JAVA_HOME`` without ``bin/java``), without
  importing PySpark: Spark runs and a continuous job's view check it before they start.

Only a JVM started here is filtered; a gateway PySpark reuses (``PYSPARK_GATEWAY_PORT``) prints where it prints.

The JVM's temporary directory (``java.io.tmpdir``): Java takes ``/tmp`` whatever ``TMPDIR`` says, and a driver in
local mode keeps everything there, its shuffle files (``blockmgr-*``) included, and ``spark-*`` folders; a JVM that
dies without running its shutdown hooks (``kill -9``, the OOM killer) left them for good, and a ``TMPDIR`` pointed
at a larger disk was not used. :func:`launch_gateway` gives the JVM a directory of its own in the system's temporary
directory (Python's: ``TMPDIR`` counts), ``hop-spark-tmp-*``, marked as this process's (``hop.spilldirs``);
:func:`remove_jvm_scratch` removes it once the JVM has ended, and one whose process was killed outright is removed
by the next launch on this host. A ``spark.local.dir`` the caller sets still takes Spark's own files there.
"""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil

from hop.lifetime import stop_signals_held
from hop.spilldirs import make_marked_dir

if TYPE_CHECKING:
    from pyspark import SparkConf

__all__ = [
    "INCUBATOR_WARNING",
    "JVM_SCRATCH_PREFIX",
    "StderrFilter",
    "close_jvm_stderr",
    "flush_jvm_stderr",
    "java_option_word",
    "launch_gateway",
    "make_jvm_scratch",
    "remove_jvm_scratch",
    "stderr_reader_watched",
]

INCUBATOR_WARNING = b"WARNING: Using incubator modules: jdk.incubator.vector\n"
"""The line the JVM prints because Spark's launcher adds the incubator module (it means nothing to a hop user)."""


class StderrFilter:
    """Write a byte stream on to ``write`` without the whole lines equal to :data:`INCUBATOR_WARNING`.

    :meth:`feed` writes at once everything that cannot be the start of that line (so a progress bar's ``\\r``
    updates show as they come); only a line start that could still become it is held back, until the next bytes
    decide. :meth:`close` writes out what is held back.
    """

    def __init__(self, write: Any) -> None:
        self._write = write
        self._held = b""
        self._at_line_start = True

    def feed(self, data: bytes) -> None:
        data, self._held = self._held + data, b""
        kept: list[bytes] = []
        start = 0
        while start < len(data):
            end = data.find(b"\n", start)
            if end < 0:
                rest = data[start:]
                if self._at_line_start and INCUBATOR_WARNING.startswith(rest):
                    self._held = rest
                else:
                    kept.append(rest)
                    self._at_line_start = False
                break
            line = data[start : end + 1]
            if not (self._at_line_start and line == INCUBATOR_WARNING):
                kept.append(line)
            self._at_line_start = True
            start = end + 1
        if kept:
            self._write(b"".join(kept))

    def close(self) -> None:
        held, self._held = self._held, b""
        if held:
            self._write(held)


_reader_gone: list[Callable[[], None]] = []
"""What :func:`stderr_reader_watched` calls when the JVM's lines find the reader of this process's stderr gone."""


def _write_stderr(data: bytes) -> None:
    view = memoryview(data)
    try:
        while view:
            view = view[os.write(2, view) :]
    except BrokenPipeError:  # (its reader has gone: ``hop run ... 2>&1 | head -1``)
        while _reader_gone:
            # (IndexError: a block left meanwhile; nothing may end the thread that drains the JVM's pipe)
            with contextlib.suppress(Exception):
                _reader_gone.pop()()
    except OSError:  # (no stderr to write to: lost, as the JVM's own write would be; the pipe must still drain)
        pass


@contextlib.contextmanager
def stderr_reader_watched(gone: Callable[[], None]) -> Iterator[None]:
    """While inside, ``gone()`` is called once if a write of the JVM's lines (Spark's log, its progress bar, the
    lines of the Python workers) finds the reader of this process's stderr gone; from the thread that forwards
    them, or one flushing them (:func:`flush_jvm_stderr`), so it must not block. The JVM writes nothing the while
    its progress bar does not change (a stage of one long task): a reader gone is found at its next line. What it
    writes is dropped either way, as the reader that went would have dropped it."""
    _reader_gone[:] = [gone]
    try:
        yield
    finally:
        _reader_gone.clear()


class _JvmStderr:
    """The read end of the JVM's stderr pipe, pumped by a daemon thread through a :class:`StderrFilter`.

    The read end is non-blocking and every read happens under ``_lock``, so :meth:`drain` (any thread) and the pump
    never split or reorder the stream.
    """

    def __init__(self) -> None:
        self._read_fd, self.write_fd = os.pipe()
        os.set_blocking(self._read_fd, False)
        self._filter = StderrFilter(_write_stderr)
        self._lock = threading.Lock()
        self._ended = False
        # A daemon: the pipe ends only when the JVM does, and a JVM left running exits only once this process has
        # exited and closed its stdin, so a thread that exit waited for would hang it; what the JVM writes after
        # Python's last flush is lost then (its read end is gone), but a session stopped first writes nothing more,
        # and one left running writes only INFO lines, which hop's log4j2 configuration does not print.
        self._thread = threading.Thread(target=self._pump, name="hop-jvm-stderr", daemon=True)
        self._thread.start()

    def _read_available(self, most: int | None = None) -> bool:
        """Forward what the pipe holds now, at most ``most`` reads of 64 KB (so a JVM that keeps writing cannot hold
        a caller of :meth:`drain`); False once every writer has closed its end."""
        with self._lock:
            reads = 0
            while not self._ended and (most is None or reads < most):
                reads += 1
                try:
                    data = os.read(self._read_fd, 65536)
                except BlockingIOError:
                    return True
                if data:
                    self._filter.feed(data)
                else:
                    self._filter.close()
                    self._ended = True
            return not self._ended

    def _pump(self) -> None:
        waiting = select.poll()  # (not select.select, which refuses descriptors past 1023)
        waiting.register(self._read_fd, select.POLLIN)
        while True:
            waiting.poll()
            if not self._read_available():
                break
        os.close(self._read_fd)  # (here only: no other thread reads once the pipe has ended)

    def drain(self) -> None:
        self._read_available(most=64)

    def close_write_end(self) -> None:
        """Close this process's copy of the write end (the JVM holds its own): the pipe ends when the JVM does."""
        os.close(self.write_fd)

    def wait_closed(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for the writers to end, then forward what is left."""
        self._thread.join(timeout)
        self.drain()


_current: _JvmStderr | None = None

JVM_SCRATCH_PREFIX = "hop-spark-tmp-"
"""The name of the JVM's temporary directory, in the system's temporary directory, up to its random part."""

_scratch: Path | None = None


def launch_gateway(conf: SparkConf) -> Any:
    """Launch PySpark's driver JVM for ``conf`` (as ``SparkContext`` would) with its stderr filtered and its
    temporary directory a new ``hop-spark-tmp-*`` (``conf``'s ``spark.driver.extraJavaOptions`` gets
    ``-Djava.io.tmpdir``, before the caller's options, which may set another); return the py4j gateway (its
    ``proc`` is the JVM's process). The directory is removed if the launch fails, else by
    :func:`remove_jvm_scratch`."""
    from pyspark.java_gateway import launch_gateway as launch_pyspark_gateway

    global _current, _scratch
    close_jvm_stderr(timeout=0)
    remove_jvm_scratch()
    stderr = _JvmStderr()
    before = {child.pid for child in psutil.Process().children(recursive=True)}
    try:
        with stop_signals_held():  # (a Ctrl-C as it is made acts once it is recorded for removal)
            _scratch = make_jvm_scratch()
        ours = f"-Djava.io.tmpdir={java_option_word(str(_scratch))}"
        conf.set("spark.driver.extraJavaOptions", f"{ours} {conf.get('spark.driver.extraJavaOptions') or ''}".strip())
        gateway = launch_pyspark_gateway(conf, popen_kwargs={"stderr": stderr.write_fd})
    except Exception:
        stderr.close_write_end()
        stderr.wait_closed(timeout=5)  # (the JVM has exited: its last words first)
        remove_jvm_scratch()
        raise
    except BaseException:  # Ctrl-C while the JVM starts: it ignores SIGINT, so its pipe would stay open for 5 s
        with stop_signals_held():  # (a second Ctrl-C must not leave it half done)
            _end_new_children(before)
            remove_jvm_scratch()
        stderr.close_write_end()
        raise
    stderr.close_write_end()
    _current = stderr
    return gateway


def make_jvm_scratch() -> Path:
    """A new ``hop-spark-tmp-*`` directory marked as this process's, once those of processes on this host killed
    outright are removed (``hop.spilldirs``)."""
    return make_marked_dir(None, JVM_SCRATCH_PREFIX)


def java_option_word(text: str) -> str:
    """``text`` as one word of a Spark launcher's option string (which splits at white space and reads quotes and
    backslashes): each such character escaped."""
    return "".join(f"\\{char}" if char in "\\\"'" or char.isspace() else char for char in text)


def remove_jvm_scratch() -> None:
    """Remove the temporary directory of the JVM :func:`launch_gateway` launched, once that JVM has ended."""
    global _scratch
    if _scratch is not None:
        shutil.rmtree(_scratch, ignore_errors=True)
        _scratch = None


def _end_new_children(before: set[int]) -> None:
    """End the JVM that PySpark was starting when Ctrl-C or SIGTERM came: the descendants of this process not in
    ``before``. PySpark's launch loses its process then, and deletes the directory the JVM was to write its port in:
    the JVM's main thread fails, its py4j server thread keeps it running, and closing its stdin (this process
    exiting) does not end it, as the gateway only watches stdin once started. A JVM that SIGTERM does not end within
    :data:`JVM_STOP_SECONDS` is killed."""
    children = [child for child in psutil.Process().children(recursive=True) if child.pid not in before]
    for child in children:
        with contextlib.suppress(psutil.NoSuchProcess):
            child.terminate()
    _, alive = psutil.wait_procs(children, timeout=JVM_STOP_SECONDS)
    for child in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            child.kill()
    psutil.wait_procs(alive, timeout=JVM_STOP_SECONDS)


JVM_STOP_SECONDS = 5.0
"""How long a JVM interrupted in its start-up is given to exit on SIGTERM (it ignores SIGINT), and then on SIGKILL."""


def flush_jvm_stderr() -> None:
    """Write out everything the JVM launched by :func:`launch_gateway` has written to its stderr so far.

    Enough for a caller's report to follow the JVM's lines about the call that just returned: the JVM flushes each
    log line to the pipe as it logs it (Spark logs a failure before the driver hears of it)."""
    if _current is not None:
        _current.drain()


def close_jvm_stderr(timeout: float = 10) -> None:
    """After the JVM has ended: forward its last bytes (waiting up to ``timeout`` seconds) and forget the pipe (its
    thread ends by itself once every writer has closed it)."""
    global _current
    if _current is not None:
        _current.wait_closed(timeout)
        _current = None


def java_problem() -> str | None:
    """Why PySpark cannot start its JVM here, or None. Spark's launcher runs ``$JAVA_HOME/bin/java`` when
    ``JAVA_HOME`` is set, whatever the PATH holds, else the ``java`` on the PATH."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home:
        if os.access(Path(java_home, "bin", "java"), os.X_OK):
            return None
        on_path = shutil.which("java")
        instead = f", or unset it to use the java on the PATH ({on_path})" if on_path else ""
        return (
            f"JAVA_HOME is {java_home}, which holds no bin/java, and Spark runs the java there: set JAVA_HOME to a "
            f"Java 17 installation (the directory holding bin/java){instead}"
        )
    if shutil.which("java") is None:
        return (
            "Java is not installed (Spark needs Java 17): install a JDK or JRE 17 (e.g. apt-get install "
            "openjdk-17-jre-headless), or set JAVA_HOME to one"
        )
    return None


def java_found() -> bool:
    """Whether PySpark finds the ``java`` it starts its JVM with (:func:`java_problem`)."""
    return java_problem() is None
