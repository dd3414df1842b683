"""A task process: one long-lived child of a worker that runs task attempts one after another.

Starting a Python process per task costs more than a small task, so a worker starts one task process per
slot and keeps it. The process connects a DEALER socket to its worker's ROUTER, says ``hello``, then loops: take a
``run_task``, run it (``hop.tasks``), report ``map_done``/``reduce_done`` or ``task_failed``. It exits on ``stop``
or when its worker disappears (the parent pid changes; on Linux the kernel also kills it when its worker ends,
even in the middle of the user's code: ``hop.lifetime.die_with_parent``).

Run as ``python -m hop.taskproc WORKER_ADDRESS SLOT_NAME SPILL_DIR WORKER_PID``. The worker sets
``PYTHONHASHSEED=0`` so that every task process partitions keys alike.
"""

from __future__ import annotations

import gc
import os
import sys
import time
import traceback
from collections import deque
from pathlib import Path
from typing import Any

import zmq

from hop import task_status
from hop.bad_records import BAD_RECORDS
from hop.inputs import BadRecordError, FileStamp, InputError, Split
from hop.interpreter import restore_environment
from hop.jobspec import JobSpec
from hop.lifetime import die_with_parent, ignore_stop_signals, name_process
from hop.outputs import OutputRemovedError, OutputWriteError
from hop.protocol import close_socket, connect_soon, message, unpack
from hop.spilldirs import scratch_step
from hop.tasks import TooManyBadRecords, run_map, run_reduce, unencodable_map_output
from hop.usercode import TASK_FAILURES, NoStandardInput, UserCodeError, sendable
from shuffle.buffer import CombinerKeyError, PartitionError
from shuffle.keys import NanKeyError
from shuffle.runs import UnencodableRecordError
from shuffle.spill import SpillWriteError

TASK_GC_THRESHOLDS = (50_000, 20, 20)


def _detach_standard_input() -> None:
    """No standard input for the task process, nor for the processes its user code starts (they read
    ``/dev/null``); ``sys.stdin`` reads raise, saying why (:class:`hop.usercode.NoStandardInput`)."""
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    sys.stdin = NoStandardInput()


class WorkerChannel:
    """The task side of the task-process <-> worker connection (see ``hop.protocol``)."""

    def __init__(self, socket: zmq.Socket, job_id: str) -> None:
        self._socket = socket
        self.job_id = job_id
        self._parent = os.getppid()
        self.pending: deque[dict[str, Any]] = deque()

    @property
    def control_socket(self) -> zmq.Socket:
        return self._socket

    def _exit_if_orphaned(self) -> None:
        if os.getppid() != self._parent:
            # The worker died: nobody will take this task's output, sends would queue forever and a task waiting
            # for input (a stream reducer whose sources were on that worker) would wait forever. Stop now.
            os._exit(3)

    def send(self, msg_type: str, /, **fields: Any) -> None:
        self._exit_if_orphaned()
        fields.setdefault("job_id", self.job_id)
        self._socket.send(message(msg_type, **fields))

    def receive(self, timeout: float) -> dict[str, Any] | None:
        """The next control message, waiting at most ``timeout`` seconds; exits the process if the worker died
        (tasks poll this at least every second, so an orphaned task ends within about a second)."""
        self._exit_if_orphaned()
        if self.pending:
            return self.pending.popleft()
        if self._socket.poll(int(timeout * 1000)):
            return unpack(self._socket.recv())
        return None


def skip_hint(what: str, output: str) -> str:
    """What a job failed by one bad record (a line that cannot be read, a map or reduce call that raised) can do: the
    error names the record, this says how to run past it, and where the skipped ``what`` (records, keys) would be
    listed: ``OUT/_bad_records`` of the run's output ``OUT``. That is the job's ``output``, or for a run's earlier
    step, whose output is in the run's scratch folder, the run's (``hop.bad_records`` moves each step's listing
    there). It said ``OUTPUT/_bad_records`` word for word, which a user had to work out."""
    step = scratch_step(output)
    run_output = output if step is None else str(step[0])
    listed = os.path.join(run_output, BAD_RECORDS)
    return f"; pass --skip-bad-records N to skip up to N such {what} per task (listed in {listed})"


def _failure(kind: str, index: int, attempt: int, error: BaseException, output: str) -> dict[str, Any]:
    if not isinstance(error, Exception):  # user code no call of it catches (a job's __init__, an aggregate's finish):
        # sys.exit(), or another exception that is no Exception (hop.usercode.TASK_FAILURES)
        error = UserCodeError(f"{kind} task {index}", error, None)
    if isinstance(error, UserCodeError):
        hint = skip_hint("keys" if kind == "reduce" else "records", output) if error.skippable else ""
        return {
            "error": f"{error}{hint}",
            "traceback": error.user_traceback,
            "record": error.record,
            "retryable": False,
        }
    if isinstance(error, TooManyBadRecords):
        return {
            "error": f"{kind} task {index}: {error}",
            "traceback": error.user_traceback,
            "record": None,
            "retryable": False,
        }
    if isinstance(error, (InputError, ValueError, TypeError)):
        hint = skip_hint("records", output) if isinstance(error, BadRecordError) else ""
        return {
            "error": f"{kind} task {index}: {error}{hint}",
            # Bad input names its file, offset and remedy, an unencodable record, a NaN key, a combiner's changed key or
            # a partition out of range its key, a removed output directory itself: the engine's frames would only
            # bury that.
            "traceback": (
                None
                if isinstance(
                    error,
                    (
                        InputError,
                        UnencodableRecordError,
                        NanKeyError,
                        CombinerKeyError,
                        PartitionError,
                        OutputRemovedError,
                    ),
                )
                else traceback.format_exc()
            ),
            "record": None,
            "retryable": False,
        }
    if isinstance(error, (OutputWriteError, SpillWriteError)):  # (a disk's fault: retried, as another may have room)
        return {
            "error": f"{kind} task {index} attempt {attempt}: {error}",
            "traceback": None,  # (it names the file and the remedy: the engine's frames would only bury that)
            "record": None,
            "retryable": True,
        }
    return {
        "error": f"{kind} task {index} attempt {attempt}: {type(error).__name__}: {error}",
        "traceback": traceback.format_exc(),
        "record": None,
        "retryable": True,
    }


def run_task(socket: zmq.Socket, task: dict[str, Any], spill_dir: Path) -> None:
    """Run one ``run_task`` message to completion and report the outcome."""
    spec = JobSpec.from_wire(task["job"])
    kind, index, attempt = task["kind"], task["index"], task["attempt"]
    channel = WorkerChannel(socket, spec.job_id)
    channel.send("task_started", kind=kind, index=index, attempt=attempt, pid=os.getpid(), at=time.time())
    job_dir = spill_dir / spec.job_id

    def send_status(text: str) -> None:  # (the job's set_status: hop.task_status)
        channel.send("task_status", kind=kind, index=index, attempt=attempt, message=sendable(text))

    with task_status.reporting(send_status):
        _run_attempt(channel, task, spec, job_dir)


def _run_attempt(channel: WorkerChannel, task: dict[str, Any], spec: JobSpec, job_dir: Path) -> None:
    """Run the attempt ``task`` gives, and send its ``*_done`` or ``task_failed`` through ``channel``."""
    kind, index, attempt = task["kind"], task["index"], task["attempt"]
    try:
        job_dir.mkdir(parents=True, exist_ok=True)  # reported and retried like any infrastructure failure
        if spec.options.get("stream"):
            from hop.stream.tasks import run_stream_map, run_stream_reduce  # continuous jobs only

            if kind == "map":
                below = task.get("resume_below")
                resume = tuple(below) if below else None
                stopping, pause = bool(task.get("stopping")), task.get("pause_pane")
                result = run_stream_map(spec, index, attempt, job_dir, channel, resume, stopping, pause)
                _end(channel, "map_done", index=index, attempt=attempt, at=time.time(), **result)
            else:
                host = task.get("host", "127.0.0.1")
                gone = task.get("sources_gone") or ()
                result = run_stream_reduce(spec, index, attempt, task["num_maps"], channel, host, gone)
                _end(channel, "reduce_done", index=index, attempt=attempt, at=time.time(), **result)
        elif kind == "map":
            chunks = [
                (chunk_id, Split(path, start, length, FileStamp(*stamp) if stamp else None))
                for chunk_id, path, start, length, stamp in task["chunks"]
            ]
            try:
                result = run_map(spec, index, attempt, chunks, job_dir, channel, task.get("resume"), task.get("pipe"))
            except (UnencodableRecordError, NanKeyError) as error:
                raise unencodable_map_output(spec, chunks, error) from None
            _end(channel, "map_done", index=index, attempt=attempt, at=time.time(), **result)
        else:
            host = task.get("host", "127.0.0.1")
            committed = [tuple(entry) for entry in task.get("committed", [])]
            result = run_reduce(
                spec,
                index,
                attempt,
                task["num_maps"],
                job_dir,
                channel,
                host,
                committed,
                task.get("chunk_strata"),
                task.get("pipe_to"),
                task.get("chunk_sizes"),
                task.get("derived_snapshots") or (),
            )
            _end(channel, "reduce_done", index=index, attempt=attempt, at=time.time(), **result)
    except TASK_FAILURES as error:
        failure = _failure(kind, index, attempt, error, spec.output)
        _end(
            channel,
            "task_failed",
            kind=kind,
            index=index,
            attempt=attempt,
            at=time.time(),
            **{name: sendable(item) if isinstance(item, str) else item for name, item in failure.items()},
        )


def _end(channel: WorkerChannel, msg_type: str, /, **fields: Any) -> None:
    """Report the attempt's end (``map_done``, ``reduce_done``, ``task_failed``), its last status message sent
    first (``hop.task_status.flush``): a word that came after the end would be dropped, and a failing attempt's last
    status is what a user debugging it wants."""
    task_status.flush()
    channel.send(msg_type, **fields)


def _apply_test_limits() -> None:
    """Test-only: ``HOP_TEST_FILE_SIZE_LIMIT`` caps the size of files this process writes (RLIMIT_FSIZE), so a
    test can make spill writes fail the way a full disk does, with an OSError."""
    limit = os.environ.get("HOP_TEST_FILE_SIZE_LIMIT")
    if limit:
        import resource
        import signal

        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # get EFBIG from write() instead of being killed
        resource.setrlimit(resource.RLIMIT_FSIZE, (int(limit), int(limit)))


def main(argv: list[str] | None = None) -> int:
    parent = os.getppid()  # the worker (first: it may die while this starts)
    restore_environment()  # (a restarted slot's: hop.interpreter)
    arguments = argv or sys.argv[1:]
    worker_address, slot, spill_dir = arguments[:3]
    if len(arguments) > 3:
        # The worker's pid as it gives it: a worker killed while this interpreter started (a restarted slot's takes
        # a good part of a second) left it a child of init, which ``os.getppid()`` then named as its worker: the
        # loop below never saw the worker gone, and the process waited for it for ever.
        parent = int(arguments[3])
    name_process(slot)
    # Tasks allocate millions of tuples and lists that live until the task ends (a reducer's merged groups, a
    # map's buffered values). With CPython's default threshold a collection runs every 700 allocations and
    # rescans the growing young generations: a heavy reduce spent ~15% of its time there. Collect more rarely;
    # cycles that user code creates are still collected.
    gc.set_threshold(*TASK_GC_THRESHOLDS)
    # Ints of any size are keys and values (README, Keys and values): Python's default limit on int <-> str
    # conversion (4,300 digits, a guard for services parsing untrusted text) failed a reduce writing a larger one
    # to its JSON output line, and a map reading one from a JSON line or a step's output.
    sys.set_int_max_str_digits(0)
    ignore_stop_signals(always=True)
    _detach_standard_input()
    die_with_parent()
    if os.getppid() != parent:
        return 0  # the worker is gone already (the kernel kills this process with it only from now on)
    _apply_test_limits()
    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context.instance()
    socket = context.socket(zmq.DEALER)
    socket.setsockopt(zmq.IDENTITY, slot.encode())
    socket.setsockopt(zmq.LINGER, 2000)
    connect_soon(socket, worker_address)
    socket.send(message("hello", slot=slot, pid=os.getpid()))
    try:
        while True:
            if not socket.poll(1000):
                if os.getppid() != parent:
                    return 0  # the worker is gone: nobody to report to
                continue
            request = unpack(socket.recv())
            if request["type"] == "stop":
                return 0
            if request["type"] == "run_task":
                run_task(socket, request, Path(spill_dir))
            # Commit and failure notices that arrive between tasks belong to finished reduce attempts: ignore.
    finally:
        close_socket(socket)
        context.term()


if __name__ == "__main__":
    sys.exit(main())
