"""The rules for a job's output directory, shared by the coordinator, the runners and the command line.

Kept apart from ``hop.coordinator`` so that checking an output path imports nothing heavy: ``hop run`` checks it
before it starts a cluster, and every process it starts pays for its imports in start-up time.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import itertools
import json
import os
import shutil
import time
import weakref
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from hop.pathnames import EMPTY_NAME, NOT_UTF8, non_utf8_bytes

__all__ = [
    "JOB_REPORT",
    "OutputError",
    "OutputExistsError",
    "OutputGuard",
    "OutputRemovedError",
    "check_output",
    "claim_output",
    "coordinator_kept",
    "job_report_text",
    "make_in_output",
    "output_changed",
    "output_identity",
    "output_removed",
    "prepare_output",
    "remove_from_output",
    "write_job_report",
]

JOB_REPORT = "_job.json"
"""The job's report in its output directory: what ran, how it ended and why, its counters."""


class OutputError(ValueError):
    """The output directory cannot be used; the message names it and what to do."""


class OutputExistsError(OutputError):
    """The output directory exists and may not be replaced."""


CURRENT_DIRECTORY = "the current directory"


def check_output(
    output: str,
    overwrite: bool,
    inputs: Iterable[str] = (),
    job_files: Iterable[str] = (),
    kept: Iterable[tuple[str, str]] | None = None,
) -> bool:
    """Raise :class:`OutputExistsError` if ``output`` may not be written; return whether it must be cleared.

    Clearing (``overwrite``) is refused when the directory holds one of ``inputs`` (files, directories or glob
    patterns), one of ``job_files`` or one of the directories ``kept`` (``(how the error names it, path)``; by
    default this process's current directory): it would delete what the job is about to read, the job itself, or
    the user's work. A coordinator passes its client's current directory, and its own working directory
    (:func:`coordinator_kept`)."""
    if not output:  # (read as the current directory)
        raise OutputError(f"the output directory is an empty name (an unset shell variable?): {EMPTY_NAME}")
    name = non_utf8_bytes(output)
    if name is not None:
        raise OutputError(f"output directory {name!r}: {NOT_UTF8}: choose a UTF-8 name")
    path = Path(output)
    # (os.path's tests, not Path's: those raised on a name too long, "[Errno 36] File name too long", a traceback)
    if os.path.exists(path) and not os.path.isdir(path):
        raise OutputExistsError(
            f"output {output} exists and is not a directory (-o names the directory to write): choose another"
        )
    _check_writable(output)
    if os.path.isdir(path) and any(path.iterdir()):
        if not overwrite:
            raise OutputExistsError(f"output directory {output} is not empty; choose another or pass --overwrite")
        _refuse_to_clear_inputs(output, inputs, job_files, kept)
        _refuse_to_clear_running(output)
        return True
    return False


def _check_writable(output: str) -> None:
    """Raise :class:`OutputError` if this process may not write ``output``, or create it in its nearest existing
    parent: checked before a job starts, since a job that ran into it failed at its end with a ``PermissionError``
    traceback (its report could not be written), having read all its input for nothing."""
    path = Path(output).absolute()
    folder = next((p for p in (path, *path.parents) if os.path.exists(p)), None)
    if folder is None or not os.path.isdir(folder) or os.access(folder, os.W_OK | os.X_OK):
        return  # (a parent that is a file: creating the output says so)
    what = "is not writable" if folder == path else f"cannot be created in {folder}, which is not writable"
    raise OutputError(
        f"output directory {output} {what} by this user (permission denied, or a read-only or immutable file "
        "system): choose another output directory, or grant write permission"
    )


def coordinator_kept(client_directory: str | None) -> list[tuple[str, str]]:
    """The directories a coordinator's ``--overwrite`` never clears (``kept`` of :func:`check_output`): the
    submitting client's current directory, which it sends (``client_directory``), and the coordinator's own
    working directory, named so: it is not the user's when the coordinator runs apart (``hop coordinator``), and
    an error calling it "the current directory" refused an output that held no directory of the user's."""
    kept = [] if client_directory is None else [(CURRENT_DIRECTORY, client_directory)]
    with contextlib.suppress(OSError):  # (a working directory removed meanwhile holds nothing)
        here = os.getcwd()
        if here != client_directory:
            kept.append((f"the coordinator's working directory {here} (where hop coordinator was started)", here))
    return kept


def _refuse_to_clear_inputs(
    output: str, inputs: Iterable[str], job_files: Iterable[str], kept: Iterable[tuple[str, str]] | None
) -> None:
    # os.path.realpath, not Path.resolve: that raised RuntimeError on a loop of symbolic links (an input given as
    # one crashed hop run); the input is refused as such when it is read (hop.inputs).
    root = Path(os.path.realpath(output))
    named = [(f"input {item}", item) for item in inputs] + [(f"the job file {item}", item) for item in job_files]
    named += [(CURRENT_DIRECTORY, os.getcwd())] if kept is None else kept
    # The home directory of whoever clears it: -o ~ --overwrite (a slip for ~/out) run from elsewhere deleted all of
    # it, hidden files included, as it held no input, job file nor current directory.
    home = os.path.expanduser("~")
    if home != "~":  # (none known: no HOME, no password entry)
        named.append((f"the home directory {home}", home))
    # And the temporary directory: -o /tmp --overwrite deleted every program's files there, the embedded cluster's
    # own socket and spill files among them.
    import tempfile  # (here: only a run clearing a directory pays for it)

    temporary = tempfile.gettempdir()
    named.append((f"the temporary directory {temporary}, where this and other programs keep their files", temporary))
    for what, item in named:
        resolved = Path(os.path.realpath(item))
        if resolved == root or root in resolved.parents:
            raise OutputExistsError(
                f"output directory {output} holds {what}: --overwrite would delete it; choose another output directory"
            )


def _refuse_to_clear_running(output: str) -> None:
    """Refuse to clear ``output`` when it holds the output of a run or job still running on this machine
    (:func:`hop.claims.written_below`): that run failed, its output gone under it."""
    from hop.claims import written_below

    written = written_below(output)
    if written is not None:
        raise OutputExistsError(
            f"output directory {output} holds {written}, still running: --overwrite would delete it under that "
            "run; wait for it to end or choose another output directory"
        )


def _clear(folder: Path) -> None:
    """Delete what ``folder`` holds, not the directory itself: a run's hold (:func:`claim_output`) is on it."""
    for entry in folder.iterdir():
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()


def prepare_output(
    output: str,
    overwrite: bool,
    inputs: Iterable[str] = (),
    *,
    clear: bool = True,
    kept: Iterable[tuple[str, str]] | None = None,
) -> None:
    """Create the output directory; refuse a non-empty one unless ``overwrite``, which clears it (see
    :func:`check_output` for what it never clears, ``kept``). ``clear=False`` leaves what it holds, for a client
    whose coordinator clears it once it has accepted the job (``hop.runner``): a job it refused must not have cost
    the user the previous output."""
    try:
        if check_output(output, overwrite, inputs, kept=kept) and clear:
            _clear(Path(output))
        Path(output).mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise OutputError(f"cannot create output directory {output}: {error.strerror or error}") from None


def make_in_output(output: str | Path, folder: Path) -> None:
    """Make ``folder``, inside the job's output directory ``output``, with the folders between them, but never
    ``output`` itself, which the coordinator makes as it accepts the job: one that is gone raises
    ``FileNotFoundError`` naming it. A reducer writes on until its worker ends it, after its job has ended too (a
    snapshot's files): made with all its parents, an output removed meanwhile came back, and the next run of that
    output, without ``--overwrite``, was refused it as not empty."""
    below = Path(folder).relative_to(output)
    current = Path(output)
    for name in below.parts:
        current /= name
        try:
            current.mkdir(exist_ok=True)
        except FileNotFoundError:
            raise FileNotFoundError(f"the job's output directory {output} is gone (removed while it ran)") from None


def output_identity(output: str | Path) -> tuple[int, int] | None:
    """The identity (device, inode) of the directory ``output`` names, ``None`` if there is none: taken as a job is
    accepted, and compared as it commits its parts and ends (:func:`output_removed`)."""
    try:
        status = os.stat(output)
    except OSError:
        return None
    return (status.st_dev, status.st_ino)


def output_changed(output: str | Path, identity: tuple[int, int] | None) -> bool:
    """Whether the directory ``output`` names is no longer the one whose identity (:func:`output_identity`) was
    ``identity``: it is gone, or another directory has its name. An error that says neither (a network file system's
    passing ``EIO`` or ``ESTALE``, a permission) is not taken for a removal: a healthy job would fail on it."""
    try:
        status = os.stat(output)
    except (FileNotFoundError, NotADirectoryError):
        return True
    except OSError:
        return False
    return (status.st_dev, status.st_ino) != identity


def remove_from_output(output: str | Path, identity: tuple[int, int] | None, name: str) -> None:
    """Remove the folder ``name`` (the job's ``_temporary``) from the output directory ``output`` only if that is the
    directory of ``identity`` (:func:`output_identity`, taken as the job was accepted; ``None``: whichever has the
    name). Removed through a descriptor of the directory checked, so it is taken from that one even if it is moved
    meanwhile: a folder of that name in another directory under ``output``'s name (another run's, or the user's) is
    left alone, and nothing is removed from an ``output`` that is gone."""
    try:
        descriptor = os.open(output, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        status = os.fstat(descriptor)
        if identity is None or (status.st_dev, status.st_ino) == identity:
            shutil.rmtree(name, ignore_errors=True, dir_fd=descriptor)
    finally:
        os.close(descriptor)


def output_removed(output: str | Path, what: str | None = None) -> str:
    """The error of a job whose output directory ``output`` (``what`` it is, if not the run's own) was removed or
    moved away while it ran (its identity changed: gone, or another directory made under its name). Parts committed
    before went with it: committing the rest, or marking it ``_SUCCESS``, would present part of the result as all
    of it."""
    return (
        f"output directory {output}{f' ({what})' if what else ''} was removed or moved while the job ran, so its "
        "result cannot be complete: run the job again"
    )


class OutputRemovedError(OutputError):
    """The job's output directory was removed or moved away while the job ran (:func:`output_removed` words it)."""


class OutputWriteError(OSError):
    """A task could not write its output file (a full disk, a quota, an I/O error): the file system's fault, not the
    user's code's, so never blamed on the key being written nor skipped as a bad record (:func:`output_write_error`
    words it). Retried as a failed write of a spill file is: on a cluster another host's disk may have room."""


_NO_ROOM = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def output_write_error(path: str | Path, error: OSError) -> OutputWriteError:
    """The :class:`OutputWriteError` of ``error``, met writing the output file ``path``."""
    remedy = (
        "free space (or quota) on the output directory's file system, or write the output elsewhere (-o)"
        if error.errno in _NO_ROOM
        else "check the output directory's file system (its disk, or a network file system's server)"
    )
    failure = OutputWriteError(f"cannot write output file {path}: {error.strerror or error}; {remedy}")
    failure.errno = error.errno  # (set apart: given to the constructor, it would prefix the message "[Errno 28]")
    return failure


@contextlib.contextmanager
def writing_output(path: str | Path) -> Iterator[None]:
    """Turn an OSError of the file system failing a write (no room, an I/O error, read-only) raised inside into an
    :class:`OutputWriteError` naming ``path``, the output file written. Another OSError (the output directory
    removed meanwhile: :class:`OutputGuard`'s) passes as it is."""
    try:
        yield
    except OutputWriteError:
        raise
    except OSError as error:
        if error.errno not in (*_NO_ROOM, errno.EIO, errno.EROFS):
            raise
        raise output_write_error(path, error) from error


class OutputGuard:
    """A task's hold on the job's output directory as the task found it at its start: every file a task writes there
    (a continuous job's; a batch reducer's part and snapshots, in ``_temporary``) goes through :meth:`folder`,
    :meth:`opener` and :meth:`replace`, so that it writes nothing into a directory made again under that name
    (by anyone, itself included: a window's folder made with all its parents brought a removed output back) or into
    another one that took the name. The windows (parts) written before went with the old one: written on elsewhere,
    they would be taken for the job's whole output. The identity is this process's own reading (device numbers
    differ between hosts sharing a file system); the coordinator compares its own, taken as it accepted the job, at
    every turn of its loop (before it starts attempts), and fails the job. The coordinator holds one of its own
    while a job runs (``JobState.output_held``): it renames parts and publishes snapshots through it.

    The directory is held open (``O_DIRECTORY``) and written relative to that descriptor: a check (:meth:`check`) and
    the write after it could otherwise meet another directory put under the name in between. :meth:`close` (or the
    guard's end) closes it."""

    def __init__(self, output: str | Path) -> None:
        self.output = str(output)
        try:
            descriptor = os.open(output, os.O_RDONLY | os.O_DIRECTORY)
        except OSError:
            raise OutputRemovedError(output_removed(output)) from None
        status = os.fstat(descriptor)
        self.identity = (status.st_dev, status.st_ino)
        self.descriptor = descriptor
        self._closed = weakref.finalize(self, os.close, descriptor)  # (a task process runs attempt after attempt)
        self._scratch_held: weakref.finalize[Any, Any] | None = None

    def close(self) -> None:
        self._closed()
        if self._scratch_held is not None:
            self._scratch_held()

    def hold_scratch(self) -> None:
        """Hold the job's ``_temporary`` (made already) until :meth:`close`, telling runs on this machine that a
        job writes this output (:func:`hop.claims.hold_scratch`): a coordinator's, for each batch job it runs."""
        from hop.claims import hold_scratch

        descriptor = hold_scratch(self.descriptor)
        if descriptor is not None:
            self._scratch_held = weakref.finalize(self, os.close, descriptor)

    def changed(self) -> bool:
        """Whether the output directory is no longer the one found at the start (:func:`output_changed`)."""
        return output_changed(self.output, self.identity)

    def check(self) -> None:
        """Raise :class:`OutputRemovedError` if the output directory is no longer the one found at the start."""
        if self.changed():
            raise OutputRemovedError(output_removed(self.output))

    def folder(self, folder: Path) -> Path:
        """``folder`` (inside the output directory) made, with the folders between, once the output directory is
        checked (:meth:`check`); never the output directory itself (:func:`make_in_output`)."""
        self.check()
        current = Path()
        try:
            for name in self._below(folder).parts:
                current /= name
                with contextlib.suppress(FileExistsError):
                    os.mkdir(current, dir_fd=self.descriptor)
        except FileNotFoundError:  # (the directory held was deleted since the check)
            raise OutputRemovedError(output_removed(self.output)) from None
        return folder

    def opener(self, path: str, flags: int) -> int:
        """For ``open(path, mode, opener=guard.opener)``: ``path`` (in the output directory) opened in the directory
        found at the start."""
        return os.open(self._below(path), flags, 0o666, dir_fd=self.descriptor)

    def replace(self, source: Path, target: Path) -> None:
        """Rename ``source`` to ``target`` (both in the output directory) in the directory found at the start."""
        descriptor = self.descriptor
        os.replace(self._below(source), self._below(target), src_dir_fd=descriptor, dst_dir_fd=descriptor)

    def exists(self, path: Path) -> bool:
        """Whether ``path`` (in the output directory) is there, in the directory found at the start."""
        try:
            os.stat(self._below(path), dir_fd=self.descriptor, follow_symlinks=False)
        except FileNotFoundError:
            return False
        return True

    def listdir(self, folder: Path) -> list[str]:
        """The names in ``folder`` (in the output directory), in the directory found at the start."""
        descriptor = os.open(self._below(folder), os.O_RDONLY | os.O_DIRECTORY, dir_fd=self.descriptor)
        try:
            return os.listdir(descriptor)
        finally:
            os.close(descriptor)

    def size(self, path: Path) -> int:
        """The size of the file ``path`` (in the output directory) in the directory found at the start."""
        return os.stat(self._below(path), dir_fd=self.descriptor).st_size

    def remove_tree(self, name: str) -> None:
        """Remove the folder ``name`` (the job's ``_temporary``), if there, from the directory found at the start,
        wherever it is now (moved away: that half-written scratch is still the job's, and no one else's to clear);
        never from another directory under the output's name."""
        shutil.rmtree(name, ignore_errors=True, dir_fd=self.descriptor)

    def unlink(self, path: Path) -> None:
        """Remove ``path`` (in the output directory), if there, from the directory found at the start."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._below(path), dir_fd=self.descriptor)

    def write_whole(self, path: Path, text: str) -> None:
        """Write ``text`` as the file ``path`` (in the output directory) whole, in the directory found at the start:
        into a hidden temporary file beside it first (:func:`_temporary_beside`), renamed over it, so that a reader
        sees the old file or the new one, never part of one. Raises ``OSError`` when it cannot be written (the
        temporary file is removed)."""
        temporary = _temporary_beside(path)
        try:
            with open(temporary, "x", encoding="utf-8", opener=self.opener) as file:
                file.write(text)
            self.replace(temporary, path)
        finally:
            self.unlink(temporary)

    def copy(self, source: Path, target: Path) -> None:
        """Copy the file ``source`` to ``target`` (both in the output directory) in the directory found at the
        start."""
        with open(source, "rb", opener=self.opener) as reading, open(target, "wb", opener=self.opener) as writing:
            shutil.copyfileobj(reading, writing)

    def _below(self, path: str | Path) -> Path:
        return Path(path).relative_to(self.output)


CLAIM_TRIES = 10
"""How many times a run tries to take its output's hold, :data:`CLAIM_PAUSE` apart: a run starting that tests the
folder as an input (:func:`hop.claims.held_exclusive`) holds it for an instant, and is no writer."""
CLAIM_PAUSE = 0.01


def claim_output(output: str, read_as_written: bool = False) -> Callable[[], None]:
    """Hold ``output`` for this run against other hop runs on this machine, until the returned function is called
    (or the process ends: the hold is an ``flock`` on the directory itself, which the kernel drops with the
    process, so nothing is left to clean up). Raises :class:`OutputExistsError` if another run holds it, or a
    coordinator on this machine runs a batch job writing it (:mod:`hop.claims`), or it is inside the output of
    either (:func:`hop.claims.writer_above`: its files would be among that output's parts), naming it.

    Without it, two runs started together both found a new ``output`` empty and both wrote it. Runs submitted to
    one coordinator are also kept apart there (``hop.coordinator``); this covers runs on separate embedded
    clusters, and jobs reading what such a run writes (:func:`hop.claims.input_claimed`). A continuous run
    (``read_as_written``) holds it shared once it has it: its windows are read as they are written.

    The directory is made here, with the folders it is in (and they are removed on release if the run left them
    empty: a usage error found later leaves nothing behind); :func:`prepare_output` clears it in place, so the lock
    stays on the directory the job writes. A directory that cannot be made raises :class:`OutputError` naming it and
    why (before a run starts its cluster: the run making it later failed only then), in :func:`check_output`'s words
    where this user may not write the folder it goes in. Where something not a directory has its name (a file, a
    link to none), or the directory cannot be opened, the run goes on without the hold (:func:`check_output` reports
    what is wrong with it)."""
    from hop.claims import READ_AS_WRITTEN, holder, job_writing, writer_above

    folder = Path(output)
    # With the folders it is in, which the run would make anyway: a run making them later held nothing
    # meanwhile, and a run reading or clearing its output was not told it was being written. (os.path.lexists:
    # Path.exists raised on a folder this user may not search)
    made = list(itertools.takewhile(lambda path: not os.path.lexists(path), (folder, *folder.absolute().parents)))
    created = bool(made)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        if os.path.lexists(folder):  # (a file in the way: check_output says so)
            return lambda: None
        for path in made:  # (the folders made before the one that failed, if any)
            with contextlib.suppress(OSError):
                path.rmdir()
        _check_writable(output)  # (a folder this user may not write: said so)
        raise OutputError(_cannot_create(output, error)) from None
    try:
        descriptor = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return lambda: None
    for attempt in range(CLAIM_TRIES):
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if attempt + 1 < CLAIM_TRIES:
                time.sleep(CLAIM_PAUSE)
        except OSError:  # (a file system without flock: no hold)
            os.close(descriptor)
            return lambda: None
    else:
        named = holder(folder)
        os.close(descriptor)
        raise OutputExistsError(
            f"output directory {output} is being written by another hop run on this machine{named}; wait for it "
            "to end or choose another"
        ) from None
    # A batch job of a coordinator on this machine whose own run holds nothing here (it ran from another host or
    # the API, or was killed): its scratch folder is held (hop.claims.hold_scratch).
    writer = None if created else job_writing(folder)
    if writer is not None:
        os.close(descriptor)
        raise OutputExistsError(
            f"output directory {output} is being written by {writer}; wait for that job to end (or stop it) or "
            "choose another"
        )
    outer = writer_above(folder)
    if outer is not None:
        os.close(descriptor)
        for path in made:  # (left as found)
            with contextlib.suppress(OSError):
                path.rmdir()
        raise OutputExistsError(
            f"output directory {output} is inside {outer}, still running: its files would be mixed with that "
            "output's; choose a folder outside it"
        )
    if read_as_written:
        with contextlib.suppress(OSError):
            fcntl.flock(descriptor, READ_AS_WRITTEN | fcntl.LOCK_NB)

    def release() -> None:
        # Only if still empty, and still the one made here: one the user made under its name since (the run's
        # moved away, and the run failed for it) is theirs.
        if created and _same_directory(descriptor, folder):
            with contextlib.suppress(OSError):
                for path in made:  # (the output, then the folders made for it, while each is left empty)
                    path.rmdir()
        os.close(descriptor)  # (closing it drops the flock)

    return release


def _cannot_create(output: str, error: OSError) -> str:
    """Why the output directory ``output`` cannot be made, from the ``error`` making it raised, and what to do: a
    folder on its way that is a file is named (``Not a directory`` named none), and so is the folder whose file
    system makes no directory in it (``/proc``, which says ``No such file or directory`` of a folder that is
    there)."""
    path = Path(output).absolute()
    reason = error.strerror or str(error)
    if error.errno == errno.ENOTDIR:
        file = next((p for p in path.parents if os.path.lexists(p) and not os.path.isdir(p)), None)
        if file is not None:
            reason += f" ({file} is a file)"
    elif error.errno == errno.ENOENT:
        parent = next((p for p in path.parents if os.path.isdir(p)), None)
        if parent is not None:
            reason += f" (its file system makes no directory in {parent})"
    return f"cannot create output directory {output}: {reason}; choose another output directory"


def _same_directory(descriptor: int, folder: Path) -> bool:
    """Whether ``folder`` names the directory open as ``descriptor``."""
    status = os.fstat(descriptor)
    return output_identity(folder) == (status.st_dev, status.st_ino)


def write_job_report(output: str | Path, report: dict[str, Any], replace: bool = True) -> bool:
    """Write ``report`` as ``output/_job.json`` whole: into a hidden temporary file in ``output`` first, then renamed
    over it, so that a reader (``hop status``, the web view, the next step of a pipeline, a user's script) sees the
    old report or the new one, never half of one. With ``replace=False`` an existing report is kept (``False`` is
    returned): the coordinator's own report wins over one a client writes for a job it gave up on. Returns whether
    the report was written; raises ``OSError`` when it cannot be (the temporary file is removed)."""
    folder = Path(output)
    text = job_report_text(report)
    temporary = _temporary_beside(folder / JOB_REPORT)
    try:
        with open(temporary, "x", encoding="utf-8") as file:
            file.write(text)
        if replace:
            os.replace(temporary, folder / JOB_REPORT)
        else:
            try:
                os.link(temporary, folder / JOB_REPORT)  # (a link is made whole or not at all, and never replaces)
            except FileExistsError:
                return False
            except OSError:  # a file system without hard links: created exclusively, then written
                with open(folder / JOB_REPORT, "x", encoding="utf-8") as file:
                    file.write(text)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
    return True


def job_report_text(report: dict[str, Any]) -> str:
    """The text of ``_job.json`` holding ``report``."""
    return json.dumps(report, indent=2, ensure_ascii=False) + "\n"


def _temporary_beside(path: Path) -> Path:
    """A hidden temporary name beside ``path``, for writing it whole. A name of its own: two writers never share one
    (not mkstemp, whose file is private to the user, 0600). (``os.urandom``, as ``secrets.token_hex`` reads it:
    ``secrets`` imports OpenSSL's hashes, ~3 ms of the start of every embedded cluster.)"""
    return path.with_name(f".{path.name}.{os.getpid()}-{os.urandom(4).hex()}.tmp")
