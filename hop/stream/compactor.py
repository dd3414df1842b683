"""Keeps a continuous job's materialized view (:mod:`hop.stream.view`) up to date while the job runs.

:class:`Compactor` runs in the process that submitted the job: a daemon thread asks for a compaction every
``interval`` seconds while new deltas exist and none runs. The compactions run in one child process group (Python
and the JVM PySpark starts), never in the engine's processes, and that child is kept between compactions: starting
a JVM and a SparkSession costs far more CPU than compacting a few seconds of deltas, so a new child per compaction
would make the view's upkeep the biggest load of a steady stream. A child idle for ``keep_alive`` seconds is closed
(a JVM holds hundreds of MB), a child that fails a compaction exits (the next one starts afresh), and one running past
``run_timeout`` is killed with its group.

The child is ``python -m hop.stream.compactor OUT --master M --identity DEV:INO``: for every line ``compact`` on its
stdin it compacts OUT on its session and answers one JSON line, ``{"ok": true}`` or ``{"ok": false, "error":
"..."}``; it ends at the end of its stdin. Everything else it or its JVM prints goes to a log file the parent reads
only to explain a crash.

The compactor holds OUT's identity (device, inode) as it found it at its start, which the job made: once another
directory has OUT's name (the job's moved away, a user's put there), it asks for no compaction, and a compaction
asked for before makes and reads nothing there (``hop.stream.view.compact``'s ``identity``); ``last_error`` says OUT
was removed or moved.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from hop.lifetime import stop_signals_held
from hop.outputs import output_changed, output_identity, output_removed
from hop.spilldirs import make_marked_dir
from hop.stream.view import SPARK_CONF, PathLike, ViewInfo, compact, pending_deltas, view_info

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["Compactor", "main"]

_PROJECT_ROOT = str(Path(__file__).resolve().parents[2])
_REQUEST = b"compact\n"
SCRATCH_PREFIX = "hop-compaction-"
"""The name of a compaction child's temporary directory, in the system's, up to its random part."""
_CLOSE_TIMEOUT = 30.0  # a child told to end (stdin closed) stops its SparkSession and JVM within this


class Compactor:
    """Compacts ``out_dir`` every ``interval`` s while new deltas exist, one compaction at a time, in a child kept
    while it is used (module docstring). ``compactions``/``failures`` count compactions that succeeded/failed or
    were killed (past ``run_timeout``, or at ``stop``'s timeout); ``last_error`` is the latest one's error (None once
    one succeeds), ``last_seconds`` its wall time; ``children_started`` counts the child processes started.
    ``identity``: OUT's (``hop.outputs.output_identity``) as the job made it, by default as found now; once OUT is
    another directory, or gone, no compaction is asked for (module docstring)."""

    def __init__(
        self,
        out_dir: PathLike,
        interval: float = 10.0,
        spark_master: str = "local[1]",
        *,
        run_timeout: float = 600.0,
        keep_alive: float | None = None,
        identity: tuple[int, int] | None = None,
    ) -> None:
        self.out = Path(out_dir).resolve()
        self.identity = output_identity(self.out) if identity is None else identity
        self.interval, self.spark_master, self.run_timeout = interval, spark_master, run_timeout
        self.keep_alive = max(60.0, 3 * interval) if keep_alive is None else keep_alive
        self.compactions = self.failures = self.children_started = 0
        self.last_error: str | None = None
        self.last_seconds: float | None = None
        self._stopping = threading.Event()
        self._child: _Child | None = None
        self._asked: float | None = None  # when the running compaction was asked for (monotonic), None when idle
        self._thread: threading.Thread | None = None

    @property
    def child_running(self) -> bool:
        """Whether a compaction child is alive (running a compaction or kept for the next)."""
        return self._child is not None and self._child.process.poll() is None

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError("this Compactor was already started")
        self._thread = threading.Thread(target=self._loop, name=f"compactor {self.out}", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        # A compaction is asked for at most once an interval (from when the one before was asked; at once after one
        # that took longer). Asking again as soon as one ended, for the deltas written meanwhile, ran them in bursts
        # of four to seven back to back, each rewriting the whole base, where one an interval was meant.
        due = time.monotonic() + self.interval
        while not self._stopping.wait(
            min(self.interval, 0.2) if self._asked is not None else max(0.0, due - time.monotonic())
        ):
            try:
                if self._asked is not None and not self._finished(block_until=None):
                    continue
                now = time.monotonic()
                if now < due:
                    continue
                due = now + self.interval
                if not self._stopping.is_set() and self._output_is_the_jobs() and pending_deltas(self.out):
                    self._ask()
                elif self._child is not None and now - self._child.last_used > self.keep_alive:
                    self._close_child(now + _CLOSE_TIMEOUT)
            except Exception as error:  # the loop outlives a full disk or a vanished directory
                self.last_error = f"{type(error).__name__}: {error}"

    def _output_is_the_jobs(self) -> bool:
        """Whether OUT is still the directory the compactor started with; if not, ``last_error`` says so."""
        if self.identity is not None and output_changed(self.out, self.identity):
            self.last_error = output_removed(self.out)
            return False
        return True

    def compact_now(self, timeout: float = 600.0) -> ViewInfo | None:
        """Compact now in the kept child (started if there is none) and wait up to ``timeout`` seconds; for a
        Compactor whose thread was not started. The outcome is counted as the thread's are; returns the view."""
        if self._thread is not None:
            raise RuntimeError("this Compactor's thread runs its compactions")
        self._ask()
        self._finished(block_until=time.monotonic() + timeout)
        return view_info(self.out)

    def _ask(self) -> None:
        """Ask the child (started if there is none) for a compaction."""
        if self._child is not None and self._child.process.poll() is not None:
            self._child.discard()
            self._child = None
        if self._child is None:
            # A Ctrl-C (the one that skips the last compaction) is held until the child is recorded: taken inside
            # Popen, it left a child running that abandon() could not end.
            with stop_signals_held():
                self._child = _Child.start(self.out, self.spark_master, self.identity)
            self.children_started += 1
        self._asked = time.monotonic()
        try:
            assert self._child.process.stdin is not None
            self._child.process.stdin.write(_REQUEST)
            self._child.process.stdin.flush()
        except OSError:  # it died meanwhile: _finished sees it exited and reads why from its log
            pass

    def _finished(self, block_until: float | None) -> bool:
        """Whether the asked compaction ended (recording it), waiting for it until ``block_until`` (monotonic; None:
        do not wait). Past ``run_timeout``, or ``block_until`` when given, the child is killed and it counts as failed.
        """
        child, asked = self._child, self._asked
        assert child is not None and asked is not None
        give_up = asked + self.run_timeout if block_until is None else min(block_until, asked + self.run_timeout)
        while True:
            reply = child.reply(timeout=0.0 if block_until is None else min(0.2, max(0.0, give_up - time.monotonic())))
            if reply is not None:
                self._record(reply, time.monotonic() - asked)
                if not reply.get("ok"):
                    self._close_child(time.monotonic() + _CLOSE_TIMEOUT)  # it exits after a failure: reap it
                return True
            if child.process.poll() is not None and child.reply(timeout=0.5) is None:
                self._record({"ok": False, "error": f"exit {child.process.returncode}: {child.last_log_line()}"},
                             time.monotonic() - asked)  # fmt: skip
                self._close_child(time.monotonic())
                return True
            if time.monotonic() >= give_up:
                self._record({"ok": False, "error": None}, time.monotonic() - asked)
                self._close_child(time.monotonic())  # killed with its group
                return True
            if block_until is None:
                return False

    def _record(self, reply: dict[str, Any], seconds: float) -> None:
        self._asked, self.last_seconds = None, seconds
        if self._child is not None:
            self._child.last_used = time.monotonic()
        if reply.get("ok"):
            self.compactions, self.last_error = self.compactions + 1, None
            return
        self.failures += 1
        self.last_error = reply["error"] or f"killed after {seconds:.1f}s"

    def _close_child(self, deadline: float) -> None:
        """End the child: tell it to stop and wait until ``deadline``, then end its process group."""
        child, self._child = self._child, None
        if child is not None:
            child.close(deadline)

    def stop(self, final: bool = True, timeout: float = 600.0) -> ViewInfo | None:
        """Stop the loop, wait for the running compaction, then (``final``) run a last one if deltas are pending, and
        end the child; a compaction still running after ``timeout`` seconds in all is killed. Returns the view. A
        KeyboardInterrupt meanwhile (a second Ctrl-C) ends the child with its JVM at once and propagates."""
        deadline = time.monotonic() + timeout
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout=max(0.0, deadline - time.monotonic()))
        if self._thread is not None and self._thread.is_alive():  # it only stats files and writes a line: a hung disk
            self.last_error = "the compaction thread did not stop in time"
            return view_info(self.out)
        try:
            if self._asked is not None:
                self._finished(block_until=deadline)
            if final and self._output_is_the_jobs() and pending_deltas(self.out) and time.monotonic() < deadline:
                self._ask()
                self._finished(block_until=deadline)
        except KeyboardInterrupt:
            # The last compaction is given up, not left running in its own session (its JVM went on for half a
            # minute). The deltas stay; the next compaction takes them.
            self.abandon()
            raise
        self._close_child(min(deadline, time.monotonic() + _CLOSE_TIMEOUT))
        return view_info(self.out)

    def abandon(self) -> None:
        """Stop at once (a Ctrl-C, whether or not :meth:`stop` was running): no more compactions are asked for, a
        running one is given up and the child ends with its JVM; the deltas stay for the next compaction."""
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout=5)  # (it only stats files and writes a line; it asks nothing once stopping)
        self._asked = None
        self._close_child(time.monotonic())


class _Child:
    """A compaction child: its process (stdin for requests, stdout for replies), the file its other output goes to,
    the temporary directory it was given (``TMPDIR``), and when it last answered (monotonic)."""

    def __init__(self, process: subprocess.Popen[bytes], log: IO[bytes], scratch: str) -> None:
        self.process, self.log, self.scratch = process, log, scratch
        self.last_used = time.monotonic()
        self._replies: queue.Queue[dict[str, Any]] = queue.Queue()
        threading.Thread(target=self._read_replies, name=f"compaction child {process.pid}", daemon=True).start()

    @classmethod
    def start(cls, out: Path, spark_master: str, identity: tuple[int, int] | None = None) -> _Child:
        log = tempfile.TemporaryFile()  # noqa: SIM115 (close() closes it); a file, not a pipe, never fills up
        # The child's own temporary directory, removed once it has ended: PySpark's launch_gateway makes one there
        # and removes it only if it is not killed meanwhile (a second Ctrl-C, the run_timeout) while the JVM starts.
        # Marked as this process's (hop.spilldirs): one this process, killed outright, left is removed by the next.
        scratch = str(make_marked_dir(None, SCRATCH_PREFIX))
        command = [sys.executable, "-m", "hop.stream.compactor", str(out), "--master", spark_master]
        command += [] if identity is None else ["--identity", f"{identity[0]}:{identity[1]}"]
        path = os.pathsep.join(filter(None, [_PROJECT_ROOT, os.environ.get("PYTHONPATH")]))
        try:
            process = subprocess.Popen(
                command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, start_new_session=True,
                env={**os.environ, "PYTHONPATH": path, "TMPDIR": scratch},
            )  # fmt: skip
        except OSError:
            log.close()
            shutil.rmtree(scratch, ignore_errors=True)
            raise
        return cls(process, log, scratch)

    def _read_replies(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            with contextlib.suppress(ValueError):
                self._replies.put(json.loads(line))

    def reply(self, timeout: float) -> dict[str, Any] | None:
        """The next reply, waiting up to ``timeout`` seconds; None if there is none yet."""
        try:
            return self._replies.get(timeout=timeout) if timeout > 0 else self._replies.get_nowait()
        except queue.Empty:
            return None

    def last_log_line(self) -> str:
        """The last line the child wrote to its log (its error, or a JVM's), for a child that died."""
        self.log.seek(0)
        lines = [line for line in self.log.read().decode(errors="replace").splitlines() if line.strip()]
        return lines[-1] if lines else "no output"

    def close(self, deadline: float) -> None:
        """Close its stdin (it stops its session and JVM, and exits), wait until ``deadline``, then end its process
        group; remove its log and temporary directory."""
        try:
            with contextlib.suppress(OSError):
                assert self.process.stdin is not None
                self.process.stdin.close()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=max(0.0, deadline - time.monotonic()))
        finally:  # also on a Ctrl-C meanwhile; and its JVM, should it outlive the Python process
            _end_group(self.process)
            self.discard()

    def discard(self) -> None:
        """Release what the parent holds for an ended child."""
        if self.process.stdout is not None:
            with contextlib.suppress(OSError):
                self.process.stdout.close()
        self.log.close()
        shutil.rmtree(self.scratch, ignore_errors=True)


GROUP_GRACE = 10.0
"""Seconds a compaction's process group gets to end after SIGTERM before it is sent SIGKILL, and after SIGKILL
before it is given up on (so at most twice this in all)."""


def _end_group(process: subprocess.Popen[bytes]) -> None:
    """End a compaction's process group (the Python process and its JVM): SIGTERM, then SIGKILL to what is still
    running :data:`GROUP_GRACE` seconds later. Returns once no process of the group runs, or :data:`GROUP_GRACE`
    seconds after the SIGKILL (a process in uninterruptible sleep)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, sig)
        if _group_ended(process, time.monotonic() + GROUP_GRACE):
            return


def _group_ended(process: subprocess.Popen[bytes], deadline: float) -> bool:
    """Wait until ``deadline`` for the child and every other process of its group to end; True if they did.

    The child is waited for (reaped); the JVM is not its to reap once the child has exited, and it ends later
    than the child on SIGTERM (its shutdown hooks run first), so its group is looked up until it is empty."""
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=max(0.0, deadline - time.monotonic()))
    while _group_running(process.pid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


def _group_running(group: int) -> bool:
    """Whether a process of process group ``group`` still runs (a zombie has ended; only its parent's reaping is
    left)."""
    import psutil  # (only on the stop path)

    for candidate in psutil.process_iter():
        try:
            if os.getpgid(candidate.pid) == group and candidate.status() != psutil.STATUS_ZOMBIE:
                return True
        except (OSError, psutil.Error):  # gone meanwhile
            continue
    return False


def serve(
    out: str, spark_master: str, requests: IO[bytes], replies: IO[str], identity: tuple[int, int] | None = None
) -> int:
    """The child's loop: a compaction of ``out`` (while it is the directory of ``identity``, when given) per request
    line, a JSON reply line each, until ``requests`` ends; the SparkSession starts when a compaction first needs one
    (new deltas, all well-formed) and stops at the end.
    Returns the exit status: 0, or 1 after a failed compaction (it ends there, so a broken session or JVM is not
    reused)."""
    from hop.spark_engine import shutdown_jvm, start_session, stop_session

    session = None

    def kept_session() -> SparkSession:
        nonlocal session
        if session is None:
            session = start_session(spark_master, "hop view compaction", quiet=True, conf=SPARK_CONF)
        return session

    try:
        for _ in requests:
            try:
                compact(out, spark=kept_session, identity=identity)
            except Exception as error:  # noqa: BLE001 (every failure is the parent's to report)
                print(json.dumps({"ok": False, "error": f"{error}"}), file=replies, flush=True)
                return 1
            print(json.dumps({"ok": True}), file=replies, flush=True)
        return 0
    finally:
        try:
            if session is not None:
                stop_session(session)
        finally:
            # Also without a session: one that failed to start once its JVM was up (a bad setting, a master gone)
            # left that JVM running past this process's exit and its temporary directory (hop-spark-tmp-*, Spark's
            # own folders in it) behind. No JVM: nothing to do.
            shutdown_jvm()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hop.stream.compactor", description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--master", default="local[1]", help="Spark master (local[1])")
    parser.add_argument("--identity", help="DEV:INO of OUT as the job made it: compact nothing in another directory")
    args = parser.parse_args(argv)
    device, _, inode = (args.identity or "").partition(":")
    identity = (int(device), int(inode)) if args.identity else None
    # Replies go to the stdout it was given; everything else written to fd 1 (the JVM's, a library's print) goes to
    # the log with stderr, so it cannot be taken for a reply.
    replies = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    with replies:
        return serve(args.out, args.master, sys.stdin.buffer, replies, identity)


if __name__ == "__main__":  # run as the importable module, as the view's Spark functions are pickled by reference
    from hop.stream.compactor import main as _main

    sys.exit(_main())
