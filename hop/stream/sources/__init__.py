"""Sources of continuous queries: unbounded (or replayed) streams of records, read by polling.

:func:`open_source` opens one from a URL; options follow the first ``?`` as ``key=value`` pairs joined by ``&``
(of a ``tail:`` or ``replay:`` path that exists with a ``?`` in it, the ``?`` after it: :func:`_path_and_options`):

- ``tail:DIR[?glob=PATTERN]`` reads every regular file in DIR whose name does not start with ``.`` or ``_`` (and matches
  the shell pattern PATTERN, or is PATTERN itself, when given: ``glob=*.log``) as UTF-8 text lines, picking up lines
  appended later and files created later (read in order of ``(mtime, name)`` when first seen). Only complete lines are
  returned: a partial last line waits for its ``\\n``. Files are tracked by ``(st_dev, st_ino)``, not by name, and kept
  open, so rotation loses nothing: when ``app.log`` is renamed (inside DIR or out of it) and a new ``app.log`` created,
  the old file is read to its end and the new one from its start. A file that left DIR is closed once it has had no new
  bytes for :data:`GONE_GRACE` seconds (its last line is then returned even without a ``\\n``). A file truncated in
  place (its size fell below the read position, or its first bytes changed) is read again from its start, after the
  lines read before the truncation; when it was rotated by copy and truncation (logrotate's ``copytruncate``) and the
  copy is in DIR, the copy is recognised (it holds exactly the bytes read from the original) and read on from where the
  original was, so nothing is read twice (see :class:`TailSource` for the moment between copy and truncation).
- ``zmq:ENDPOINT`` binds a PULL socket (producers connect PUSH sockets); ``zmq+sub:ENDPOINT`` connects a SUB socket,
  subscribed to everything, to a publisher. Each frame is one record, a msgpack value decoded as
  ``shuffle.codec.unpackb`` decodes it (plain msgpack, ints past 64 bits as ``shuffle.codec`` packs them, arrays as
  tuples, maps with any keys), or with ``?format=text`` a UTF-8 text (one trailing line break removed). Binding
  ``tcp://HOST:*`` picks a free port; the attribute ``endpoint`` holds the bound address.
- ``tcp:HOST:PORT`` listens (port 0 picks a free port, the attribute ``port`` holds it) and accepts any number of
  clients, each sending UTF-8 text lines; a client's last line without ``\\n`` ends when it disconnects.
- The attribute ``listening`` of a ``zmq:`` or ``tcp:`` source is its URL as bound, the picked port in it
  (``tcp:127.0.0.1:43517``); None for the others. The stream map tells the coordinator (``source_listening``).
- ``replay:PATH[?rate=R][&loop=0|1]`` plays the lines of a file (text, ``.jsonl`` included: the caller parses) at R
  records per second of wall clock (default: as fast as possible; a consumer that falls behind catches up by at
  most one second's worth), from the start again at the end with ``loop=1``. The last line needs no ``\\n``.

A text line (``tail``, ``replay``, ``tcp``, not counting its newline) longer than ``max_line_bytes`` is a bad record,
and the rest of it up to its newline is dropped as it is read: a file or client that never writes a newline does not
fill memory, and the lines after it are read as usual.

Contracts shared by all sources: :meth:`Source.poll` never blocks longer than its timeout (plus a few ms) and returns
[] at once for ``max_records < 1``; a record that cannot be decoded (not UTF-8, not msgpack) comes back in its place
as a bad :class:`SourceRecord` (``value`` None, ``error`` naming the source, where the record was and what to do)
and the source moves past it, so one bad record never stops a stream (the stream map drops and counts it). A record
of ``tail``, ``replay`` or ``tcp`` carries where it was (``origin`` and ``offset``: the file or client, and the byte
offset of its line), which :meth:`Source.where` puts into words for the consumer's messages about it.
Sources are not thread-safe. ``tail`` and ``replay`` are replayable: ``seek(position())`` on a fresh source
of the same URL continues right after the last record returned. ``zmq`` and ``tcp`` are not: their position is
``None`` and the records sent between a ``position()`` and a restart are lost (the caller reports the gap).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from urllib.parse import parse_qsl

from hop.inputs import MAX_LINE_BYTES
from hop.stream.sources.base import Source, SourceError, SourceRecord
from hop.stream.sources.replay import ReplaySource
from hop.stream.sources.sockets import TcpSource, ZmqSource, unknown_host, unresolved_subscriber
from hop.stream.sources.tail import TailSource

__all__ = [
    "ReplaySource",
    "Source",
    "SourceError",
    "SourceRecord",
    "TailSource",
    "TcpSource",
    "URL_FORMS",
    "ZmqSource",
    "check_sink",
    "check_source",
    "open_source",
    "source_paths",
]

URL_FORMS = "tail:DIR[?glob=PATTERN], zmq:ENDPOINT, zmq+sub:ENDPOINT, tcp:HOST:PORT or replay:PATH[?rate=R&loop=0|1]"
_OPTIONS: dict[str, set[str]] = {"tail": {"glob"}, "tcp": set(), "replay": {"rate", "loop"}}
_OPTIONS["zmq"] = _OPTIONS["zmq+sub"] = {"format"}
_ZMQ_TRANSPORTS = ("tcp", "ipc", "inproc", "pgm", "epgm", "ws", "wss", "vmci")
"""The transports ZeroMQ endpoints name (``zmq_bind``'s and ``zmq_connect``'s)."""


def open_source(url: str, max_line_bytes: int | None = None, directory: str | None = None) -> Source:
    """Open the source a URL names (forms in the module docstring); :class:`SourceError` for a bad URL.
    ``max_line_bytes`` (``--max-line-bytes``; default ``hop.inputs.MAX_LINE_BYTES``) bounds a text line of ``tail``,
    ``replay`` and ``tcp`` (without its newline): a longer one is a bad record, and the rest of it up to its newline
    is dropped, never held (a file or client without newlines must not fill memory). A relative ``tail`` or
    ``replay`` path is in ``directory`` (the submitting command's, ``StreamOptions.directory``), if given; the URL
    (``Source.url``, in messages) stays as given."""
    return _source_for(url, max_line_bytes, directory)()


def check_source(url: str, here: bool = False) -> str | None:
    """Raise :class:`SourceError` for a URL :func:`open_source` would refuse, opening nothing (the command checks
    ``--source`` before it submits; whether a path or endpoint is there is up to the host a map runs on). With
    ``here`` (the maps run on this host: the embedded cluster), a ``tail:`` directory or ``replay:`` file must be
    there too, and the host of a ``zmq:``, ``zmq+sub:`` or ``tcp:`` URL must resolve (:func:`unknown_host`); sockets
    are not bound, the map binds them.

    Returns a warning, or None: with ``here``, for a ``tail:`` glob that no file of its directory matches yet (a
    mistyped name or pattern read nothing, in silence, until stopped; files that appear later are read, so it is no
    error)."""
    opener = _source_for(url)
    if here and url.partition(":")[0] in ("tail", "replay"):
        source = opener()
        source.close()
        if isinstance(source, TailSource) and source.glob is not None:
            with os.scandir(source.directory) as entries:
                if not any(entry.is_file() and source._matches(entry.name) for entry in entries):
                    return (
                        f"tail source {url}: no file in {source.directory} matches {source.glob!r} yet; it reads "
                        "such files once they appear (check the name or pattern if they should be there)"
                    )
    elif here and (problem := unknown_host(url)) is not None:
        raise SourceError(problem)
    return None


def check_sink(endpoint: str, here: bool = False) -> None:
    """Raise :class:`SourceError` for a ``--sink`` endpoint that reducers could not connect their PUB sockets to: not
    a ZeroMQ endpoint, a ``tcp://`` one without a port number (a connect takes no ``*``) and, with ``here`` (the
    embedded cluster's reducers run on this host), one whose host does not resolve. The first two failed every reduce
    attempt, and so the job, once it ran; the last published every window to nowhere, ZeroMQ retrying the name in
    silence."""
    transport, separator, address = endpoint.partition("://")
    if not separator or transport not in _ZMQ_TRANSPORTS or not address:
        raise SourceError(
            f"--sink {endpoint!r}: expected a ZeroMQ endpoint to connect to, such as tcp://HOST:PORT or ipc:///PATH"
        )
    if transport == "tcp" and not address.rpartition(":")[2].isdigit():
        raise SourceError(
            f"--sink {endpoint!r}: a tcp:// endpoint to connect to needs its port number (tcp://HOST:PORT)"
        )
    if here and (problem := unresolved_subscriber(endpoint)) is not None:
        raise SourceError(f"--sink {endpoint!r}: cannot connect to it: {problem}")


def source_paths(urls: list[str]) -> list[str]:
    """The local paths sources read: ``tail:`` directories and ``replay:`` files (what ``--overwrite`` must not
    clear, as it must not clear a batch job's inputs)."""
    paths = []
    for url in urls:
        scheme, _, rest = url.partition(":")
        if scheme in ("tail", "replay"):
            paths.append(_path_and_options(rest)[0])
    return paths


def _path_and_options(rest: str, directory: str | None = None) -> tuple[str, str]:
    """A ``tail:`` or ``replay:`` URL after its scheme, cut into its path and its options, which follow a ``?``: the
    first ``?`` unless a path with that ``?`` in it exists (checked in ``directory`` for a relative path), as a
    batch input that exists is that file even if its name holds glob characters. So ``tail:logs?glob=*.log`` is
    ``logs`` with a glob, and ``tail:logs?1`` the directory ``logs?1`` if there is one (it was ``logs``, with options
    ``1`` refused as no ``key=value``); ``tail:logs?1?glob=*.log`` is that directory with a glob. Where no such path
    exists, the first ``?`` (its error names the path that does not)."""
    cuts = [len(rest), *(at for at, character in enumerate(rest) if character == "?")]
    for cut in cuts if len(cuts) > 1 else ():
        target = rest[:cut]
        if target and os.path.lexists(os.path.join(directory, target) if directory else target):
            return target, rest[cut + 1 :]
    target, _, query = rest.partition("?")
    return target, query


def _source_for(url: str, max_line_bytes: int | None = None, directory: str | None = None) -> Callable[[], Source]:
    """Check ``url`` (:class:`SourceError` if it is bad) and return what opens its source (a relative ``tail`` or
    ``replay`` path in ``directory``, if given)."""
    scheme, _, rest = url.partition(":")
    target, query = _path_and_options(rest, directory) if scheme in ("tail", "replay") else rest.partition("?")[::2]
    path = os.path.join(directory, target) if directory and scheme in ("tail", "replay") else target
    if path != target and _is_working_directory(directory):
        path = target  # (in the directory the task runs in, as written: messages name it as the user did)
    limit = MAX_LINE_BYTES if max_line_bytes is None else max_line_bytes
    if scheme not in _OPTIONS or not target:
        problem = f"unknown kind {scheme!r}" if scheme not in _OPTIONS else f"nothing after {scheme}:"
        raise SourceError(f"source URL {url!r}: {problem}; use {URL_FORMS}")
    try:
        # (a + is itself, not a space as in a web form: glob=web+api.log names that file; %XX still decodes)
        options = (
            dict(parse_qsl(query.replace("+", "%2B"), keep_blank_values=True, strict_parsing=True)) if query else {}
        )
    except ValueError:
        raise SourceError(f"source URL {url!r}: options {query!r} must be key=value pairs joined by &") from None
    for option in options:
        if option not in _OPTIONS[scheme]:
            known = ", ".join(sorted(_OPTIONS[scheme])) or "none"
            raise SourceError(f"source URL {url!r}: unknown option {option!r} for {scheme} (options: {known})")
    if scheme == "tail":
        glob = options.get("glob")
        if glob is not None and (not glob or "/" in glob):
            raise SourceError(f"source URL {url!r}: glob must be a pattern for file names, such as *.log (no /)")
        return lambda: TailSource(url, path, glob, limit)
    if scheme in ("zmq", "zmq+sub"):
        kind = options.get("format", "msgpack")
        if kind not in ("msgpack", "text"):
            raise SourceError(f"source URL {url!r}: format must be msgpack (the default) or text, not {kind!r}")
        transport, separator, address = target.partition("://")
        if not separator or transport not in _ZMQ_TRANSPORTS or not address:
            # (told before the job starts: ZeroMQ refused it only in the map task, after the cluster had started)
            raise SourceError(
                f"source URL {url!r}: expected a ZeroMQ endpoint after {scheme}:, such as tcp://HOST:PORT, "
                "tcp://*:PORT or ipc:///PATH"
            )
        return lambda: ZmqSource(url, target, scheme == "zmq+sub", kind == "text")
    if scheme == "tcp":
        host, _, port = target.rpartition(":")
        if not host or not port.isdigit() or int(port) > 65535:
            raise SourceError(f"source URL {url!r}: expected tcp:HOST:PORT with a port from 0 to 65535")
        return lambda: TcpSource(url, host.removeprefix("[").removesuffix("]"), int(port), limit)
    try:
        rate = float(options["rate"]) if "rate" in options else None
    except ValueError:
        rate = -1.0
    if rate is not None and not (rate > 0 and math.isfinite(rate)):
        raise SourceError(f"source URL {url!r}: rate must be a positive number of records per second")
    if options.get("loop", "0") not in ("0", "1"):
        raise SourceError(f"source URL {url!r}: loop must be 0 or 1")
    return lambda: ReplaySource(url, path, rate, options.get("loop") == "1", limit)


def _is_working_directory(directory: str | None) -> bool:
    """Whether ``directory`` is this process's working directory (False if it is not there at all)."""
    try:
        return directory is not None and os.path.samefile(directory, os.curdir)
    except OSError:
        return False
