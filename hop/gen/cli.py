"""The ``hop gen`` command: write seeded test data.

Usage::

    hop gen text OUT --size 150MB [--seed S] [--vocabulary N] [--uniform] [--files N] [--words-per-line N]
    hop gen pageviews OUTDIR [--days N] [--start YYYY-MM-DD] [--size 100MB] [--pages N] [--seed S]
                             [--no-gzip]

``--pages N`` is the page universe: exactly N distinct pages the files draw from (``hop.gen.pageviews``), and the
summary says how many of them the files list.

``OUT`` is a file, or a directory of ``part-NNNN.txt`` files when ``--files`` is above 1. Sizes are decimal:
``K``/``KB`` = 1000 bytes, ``M``/``MB`` = 10**6, ``G``/``GB`` = 10**9, ``T``/``TB`` = 10**12
(case-insensitive, fractions allowed: ``1.5GB``); ``KiB``, ``MiB``, ``GiB``, ``TiB`` are the binary units; a
plain number is bytes.

Each command prints a one-line summary to stderr and exits 0, or 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import errno
import os
import re
import socket
import sys
import time
import urllib.parse
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from hop.pathnames import EMPTY_NAME

_UNITS = {
    "": 1, "b": 1,
    "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9, "gb": 10**9, "t": 10**12, "tb": 10**12,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
}  # fmt: skip
_SIZE = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-z]*)\s*", re.IGNORECASE)


SIZE_FORM = "a number with an optional unit K, KB, M, MB, G, GB (or KiB...), e.g. 150MB"
"""The sizes :func:`parse_size` accepts, as errors name them."""


def parse_size(text: str) -> int:
    """Bytes in a size like ``150MB``, ``1.5G``, ``64KiB`` or ``1000`` (decimal units, see the module doc).

    Raises ValueError for anything else, including negative sizes and fractional byte counts.
    """
    if text.strip().startswith("-") and _SIZE.fullmatch(text.strip()[1:]):
        raise ValueError(f"invalid size {text!r}: a size cannot be negative; use {SIZE_FORM}")
    match = _SIZE.fullmatch(text)
    unit = match.group(2).lower() if match else ""
    if not match or unit not in _UNITS:
        raise ValueError(f"invalid size {text!r}: use {SIZE_FORM}")
    number, scale = match.group(1), _UNITS[unit]
    if "." in number:
        value = float(number) * scale
        if value != int(value) and scale == 1:
            raise ValueError(f"invalid size {text!r}: a byte count must be a whole number")
        return round(value)
    return int(number) * scale


class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser, but a word starting with a minus and a digit (``-5MB``, ``-1.5GB``, ``-2s``) is a value,
    as a plain negative number (``-5``) already is, never an option: ``--size -5MB`` was refused with argparse's
    "argument --size: expected one argument", which said nothing of the size, while ``--size=-5MB`` said what was
    wrong with it; both now reach the option's type, which names the accepted form. No option of hop's starts with
    a minus and a digit. Subparsers are made of the class of their parent, so the commands of ``hop`` read alike."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # (argparse's own test: a word it matches is a value unless an option looks like one; by default it
        # matches only plain negative numbers)
        self._negative_number_matcher = re.compile(r"^-\.?\d")


def size_argument(text: str) -> int:
    """argparse type for sizes (``32MB``): above zero, with argparse's error message on failure. Shared by every
    ``hop`` subcommand that takes a size."""
    try:
        size = parse_size(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    if size <= 0:
        raise argparse.ArgumentTypeError(f"invalid size {text!r}: must be above zero; use {SIZE_FORM}")
    return size


def size_at_least(minimum: int, option: str) -> Callable[[str], int]:
    """argparse type for a size of at least ``minimum`` bytes (a decimal number of KB), named ``option`` in the
    error."""

    def parse(text: str) -> int:
        size = size_argument(text)
        if size < minimum:
            least = f"{minimum // 1000}KB ({minimum:,} bytes)"
            raise argparse.ArgumentTypeError(f"{option} must be at least {least}, got {text!r} ({size:,} bytes)")
        return size

    return parse


def path_argument(text: str) -> str:
    """argparse type: a path that is not empty (Python reads ``""`` as the current directory, so ``-o "$OUT"`` or an
    input ``"$IN"`` with the variable unset wrote in, or read, all of it)."""
    if not text:
        raise argparse.ArgumentTypeError(f"an empty name (an unset shell variable?): {EMPTY_NAME}")
    return text


def output_argument(text: str) -> str:
    """argparse type: an output directory's path (:func:`written_path_argument`) that does not lead through a loop of
    symbolic links (``out -> loop -> out``): resolving it crashed hop run with a RuntimeError and its traceback."""
    path = written_path_argument(
        text, "output directory", "hop writes its output as a directory of part files (print them with cat OUT/part-*)"
    )
    try:
        os.stat(path)
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise argparse.ArgumentTypeError(
                f"{path} leads through a loop of symbolic links ({error.strerror}): point the link at a directory, "
                "or give another path"
            ) from None
    return path


def written_path_argument(text: str, what: str = "file", how: str = "hop gen writes files, not standard output") -> str:
    """A path to write (:func:`path_argument`) that is neither ``-``, which reads as standard output but made a file
    or directory named ``-``, nor one starting with ``~``, which the shell left unexpanded (quoted, or
    ``--output=~/out``) and which made a folder named ``~`` in the current one (whose ``rm -rf ~`` deletes the home
    directory): ``./-`` and ``./~`` name such paths if meant. ``what`` the path is and ``how`` hop writes it, for
    the error about ``-``."""
    path = path_argument(text)
    if path == "-":
        raise argparse.ArgumentTypeError(f"- is no {what}: {how}; give a name (./- for one named -)")
    if path.startswith("~"):
        folder = path.split("/")[0]
        home = f"$HOME{path[1:]}" if folder == "~" else f"{folder[1:]}'s home directory in place of {folder}"
        raise argparse.ArgumentTypeError(
            f"{path} starts with ~, which the shell expands only when not quoted and not after = (--output=~/out): "
            f"write {home}, or ./{path} for a directory named {folder} here"
        )
    return path


def gen_path_argument(text: str) -> str:
    """argparse type: where ``hop gen`` writes (:func:`written_path_argument`)."""
    return written_path_argument(text)


def positive_int(text: str) -> int:
    """argparse type: an integer of at least 1 (counts of reducers, workers, attempts...)."""
    return _integer_at_least(text, 1)


def non_negative_int(text: str) -> int:
    """argparse type: an integer of at least 0."""
    return _integer_at_least(text, 0)


def port_number(text: str) -> int:
    """argparse type: a TCP port to listen on, 0 (a free one) to 65535 (past it the bind raised a traceback)."""
    port = _integer_at_least(text, 0)
    if port > 65535:
        raise argparse.ArgumentTypeError(f"a port is at most 65535, got {port} (0 for a free one)")
    return port


def _integer_at_least(text: str, least: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid integer {text!r}") from None
    if value < least:
        raise argparse.ArgumentTypeError(f"must be at least {least}, got {value}")
    return value


_ADDRESS = re.compile(r"(tcp://(\[[0-9a-fA-F:.]+\]|[^\s:/\[\]]+):\d{1,5}|ipc://.+)")


_BIND = re.compile(r"(tcp://(\[[0-9a-fA-F:.]+\]|[^\s:/\[\]]+|\*):(\d{1,5}|\*)|ipc://.+)")


COORDINATOR_HELP = "the cluster's coordinator, tcp://HOST:PORT or ipc://PATH"
"""The help of every ``--coordinator`` option that takes :func:`coordinator_address`."""


def coordinator_address(text: str) -> str:
    """argparse type: a coordinator's ZeroMQ address, ``tcp://HOST:PORT`` (as ``hop coordinator`` prints it) or
    ``ipc://PATH``."""
    if not _ADDRESS.fullmatch(text) or not _port_in_range(text):
        raise argparse.ArgumentTypeError(
            f"invalid address {text!r}: expected tcp://HOST:PORT (a port from 1 to 65535) or ipc://PATH"
        )
    problem = unresolved_coordinator(text)
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    return text


def unresolved_coordinator(address: str) -> str | None:
    """What is wrong with a coordinator address whose host does not resolve (ZeroMQ would retry it in the
    background for ever, without a word), or None."""
    unresolved = unresolved_host(address)
    if unresolved is None:
        return None
    host, reason = unresolved
    if host in PLACEHOLDER_HOSTS:  # copied from the README's commands as they stand
        return (
            f"cannot reach coordinator {address}: {host} is a placeholder (host {host!r} does not resolve: "
            f"{reason}); put the coordinator's host name or IP address in its place"
        )
    return (
        f"cannot reach coordinator {address}: host {host!r} does not resolve ({reason}); check the host name, or give "
        "the coordinator's IP address"
    )


DEFAULT_BIND = "tcp://127.0.0.1:*"
"""Where ``hop coordinator`` listens without ``--bind``: no other host reaches it, so a cluster's must be given."""
DEFAULT_BIND_HELP = (
    f"default {DEFAULT_BIND}: a free port of this host's loopback, which no other host reaches; give "
    "tcp://0.0.0.0:PORT for workers and clients of other hosts"
)
"""``--bind``'s default as ``hop coordinator --help`` words it."""


def bind_address(text: str) -> str:
    """argparse type: an address to bind, ``tcp://HOST:PORT`` (``*`` for any interface or a free port; HOST may
    also name a network interface of this host, ``tcp://eth0:5555``, as ZeroMQ allows) or ``ipc://PATH``."""
    if not _BIND.fullmatch(text) or not _port_in_range(text):
        raise argparse.ArgumentTypeError(
            f"invalid address {text!r}: expected tcp://HOST:PORT (a port from 1 to 65535, or * for a free one) or "
            "ipc://PATH"
        )
    unresolved = unresolved_host(text)
    if unresolved is not None and unresolved[0] not in interface_names():  # (ZeroMQ says "No such device")
        raise argparse.ArgumentTypeError(
            f"cannot listen on {text}: host {unresolved[0]!r} does not resolve ({unresolved[1]}); give an address "
            "of this host, or 0.0.0.0 for every interface"
        )
    return text


def interface_names() -> set[str]:
    """This host's network interface names (``lo``, ``eth0``...), which ZeroMQ binds as the interface's address."""
    try:
        return {name for _, name in socket.if_nameindex()}
    except OSError:
        return set()


PLACEHOLDER_HOSTS = frozenset({"HOST", "HOSTNAME", "ADDRESS", "ADDR"})
"""Host names the documentation writes for the user's own (``tcp://HOST:5555``), which a copied command keeps."""
TRANSIENT_RESOLVER_ERRORS = frozenset({socket.EAI_AGAIN})
"""A resolver that could not answer now (DNS not up yet, as when a worker starts with its host) is no usage error."""


def unresolved_host(address: str) -> tuple[str, str] | None:
    """The host of a ``tcp://HOST:PORT`` address as written and why it does not resolve, or None if it does (or is
    ``*``, an IP address, or the address is not tcp), or if the resolver failed only for now."""
    parsed = urllib.parse.urlsplit(address)
    if parsed.scheme != "tcp" or not parsed.hostname or parsed.hostname == "*":
        return None
    written = parsed.netloc.rsplit(":", 1)[0]  # (``hostname`` is lower-cased: the error names the host as given)
    try:
        socket.getaddrinfo(parsed.hostname, None, type=socket.SOCK_STREAM)
    except socket.gaierror as error:
        if error.errno in TRANSIENT_RESOLVER_ERRORS:  # the name may resolve in a moment: ZeroMQ retries it
            return None
        return written, str(error.strerror)
    except UnicodeError as error:  # a label too long for IDNA
        return written, str(error)
    return None


def _port_in_range(address: str) -> bool:
    """ZeroMQ takes a port past 65535 modulo 65536 (99999 is 34463) without a word: refuse it instead."""
    if not address.startswith("tcp://"):
        return True
    port = address.rsplit(":", 1)[1]
    return port == "*" or 1 <= int(port) <= 65535


def positive_float(text: str) -> float:
    """argparse type: a finite number above 0 (seconds)."""
    value = _number(text)
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be above 0, got {text}")
    return value


def non_negative_float(text: str) -> float:
    """argparse type: a finite number of at least 0 (an interval where 0 turns the thing off)."""
    value = _number(text)
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {text}")
    return value


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid number {text!r}") from None


def _mb(n: int) -> str:
    """A generated size in the units ``--size`` takes: MB, or KB/bytes below a megabyte (it said "0.0 MB")."""
    if n >= 10**6:
        return f"{n / 1e6:,.1f} MB"
    return f"{n / 1e3:,.1f} KB" if n >= 10**3 else f"{n} bytes"


def _reason(error: ValueError | OSError, target: str) -> str:
    """Why generating failed: a file that could not be written named as the file the user gave (``[Errno 13]
    Permission denied: '.words.txt.partial'`` named the hidden file it is written under until complete); a write
    that failed with no file named (a full disk), as ``target``, the file or directory given."""
    if not isinstance(error, OSError):
        return str(error)
    if error.filename is None:
        if error.errno not in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
            return f"cannot write {target}: {error.strerror or error}"
        # ("[Errno 28] No space left on device" alone named no file)
        return f"cannot write {target}: {error.strerror}; free space on its file system, or give a smaller --size"
    from hop.gen.whole import final_path

    return f"cannot write {final_path(Path(os.fsdecode(error.filename)))}: {error.strerror}"


_TARGET_ERRORS = (errno.ENOENT, errno.ENOTDIR, errno.EACCES, errno.EPERM, errno.EROFS)
"""What making or writing the target given says of the target itself (a folder on its way that is not there nor
can be made, a file, no permission, a read-only file system): a usage error, exit 2, as ``hop run`` exits for an
output that cannot be made; a write failing on its way (a full disk) is exit 1."""


def _exit_code(error: ValueError | OSError) -> int:
    """2 for what the user gave (a value, a target that cannot be written: :data:`_TARGET_ERRORS`), else 1."""
    return 2 if isinstance(error, ValueError) or error.errno in _TARGET_ERRORS else 1


def _print_notes(command: str, error: BaseException) -> None:
    """Print what a generator that stopped noted on its exception (``hop.gen.whole.all_or_nothing``: files there
    before that it rewrote), or on the one it was handling when a second came (a Ctrl-C held while it cleaned up)."""
    seen: BaseException | None = error
    while seen is not None:
        for note in getattr(seen, "__notes__", []):
            print(f"{command}: {note}", file=sys.stderr)
        seen = seen.__context__


def _run_text(args: argparse.Namespace) -> int:
    options: dict[str, Any] = {
        "seed": args.seed,
        "vocabulary": args.vocabulary,
        "words_per_line": args.words_per_line,
        "distribution": "uniform" if args.uniform else "zipf",
    }
    from hop.gen.text import generate_text, generate_text_files  # numpy: only when generating

    # (said before the vocabulary is built; a name ending in / names a directory too: it was written as a file)
    if args.files == 1 and (os.path.isdir(args.out) or args.out.endswith(os.sep)):
        what = "is a directory" if os.path.isdir(args.out) else "ends with /, which names a directory"
        print(
            f"hop gen text: error: {args.out} {what}: give the name of a file to write, or --files N to write N "
            "files into it",
            file=sys.stderr,
        )
        return 2
    began = time.perf_counter()
    try:
        if args.files > 1:
            summary = generate_text_files(args.out, args.size, args.files, **options)
            where = f"{args.files} files in {args.out}"
        else:
            summary = generate_text(args.out, args.size, **options)
            where = args.out
    except (ValueError, OSError) as error:
        print(f"hop gen text: error: {_reason(error, args.out)}", file=sys.stderr)
        _print_notes("hop gen text", error)
        return _exit_code(error)
    except KeyboardInterrupt as interruption:  # (hop.cli says it was interrupted; first, what it left)
        _print_notes("hop gen text", interruption)
        raise
    print(
        f"hop gen text: wrote {_mb(summary['bytes'])} "
        f"({summary['lines']:,} lines, {summary['words']:,} words) "
        f"to {where} in {time.perf_counter() - began:.1f} s",
        file=sys.stderr,
    )
    return 0


def _run_pageviews(args: argparse.Namespace) -> int:
    from hop.gen.pageviews import generate_pageviews  # numpy: only when generating

    began = time.perf_counter()
    try:
        summary = generate_pageviews(
            args.outdir,
            days=args.days,
            start=args.start,
            size_bytes=args.size,
            pages=args.pages,
            seed=args.seed,
            compress=not args.no_gzip,
            **({} if args.views_per_hour is None else {"views_per_hour": args.views_per_hour}),
        )
    except (ValueError, OSError) as error:
        print(f"hop gen pageviews: error: {_reason(error, args.outdir)}", file=sys.stderr)
        _print_notes("hop gen pageviews", error)
        return _exit_code(error)
    except KeyboardInterrupt as interruption:  # (hop.cli says it was interrupted; first, what it left)
        _print_notes("hop gen pageviews", interruption)
        raise
    stored = f", {_mb(summary['compressed_bytes'])} gzip" if not args.no_gzip else ""
    print(
        f"hop gen pageviews: wrote {summary['files']} hourly files "
        f"({_mb(summary['bytes'])} uncompressed{stored}, {summary['lines']:,} lines, "
        f"{summary['views']:,} views, {summary['pages']:,} distinct {'page' if summary['pages'] == 1 else 'pages'} "
        f"of {summary['universe']:,}) to {args.outdir} "
        f"in {time.perf_counter() - began:.1f} s",
        file=sys.stderr,
    )
    return 0


def register(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``gen`` command (with ``text`` and ``pageviews``) to an argparse subparsers object.

    Each leaf sets ``args.func(args) -> int``. Returns the ``gen`` parser.
    """
    gen = subparsers.add_parser(
        "gen",
        help="write seeded test data (text, Wikipedia-style page views)",
        description="Write seeded test data.",
    )
    kinds = gen.add_subparsers(dest="gen_kind", metavar="{text,pageviews}", required=True)

    text = kinds.add_parser(
        "text",
        help="lines of Zipf-distributed pseudo-words",
        description="Write lines of seeded pseudo-words (UTF-8, a few percent non-ASCII). "
        "Sizes: K/KB=1000, M/MB=10^6, G/GB=10^9 bytes; KiB/MiB/GiB are binary.",
    )
    text.add_argument("out", type=gen_path_argument, help="output file, or directory when --files > 1")
    text.add_argument("--size", type=size_argument, required=True, help="total bytes, e.g. 150MB (decimal units)")
    text.add_argument("--seed", type=int, default=0, help="random seed (default 0); same seed, same bytes")
    text.add_argument("--vocabulary", type=positive_int, default=100_000, help="distinct words (default 100000)")
    text.add_argument("--uniform", action="store_true", help="draw words uniformly instead of Zipf (1/rank)")
    text.add_argument(
        "--files",
        type=positive_int,
        default=1,
        metavar="N",
        help="write N files part-NNNN.txt into OUT (default 1: OUT is the file)",
    )
    text.add_argument(
        "--words-per-line", type=positive_int, default=10, metavar="N", help="words per line (default 10)"
    )
    text.set_defaults(func=_run_text)

    views = kinds.add_parser(
        "pageviews",
        help="hourly Wikipedia-style pagecounts files",
        description="Write pagecounts-YYYYMMDD-HH0000.gz files: 'lang title views bytes' "
        "lines with Zipf popularity, a language mix and per-language daily cycles.",
    )
    views.add_argument("outdir", type=gen_path_argument, help="output directory")
    views.add_argument("--days", type=positive_int, default=1, help="days of hourly files (default 1)")
    views.add_argument("--start", default="2009-01-01", help="first day, YYYY-MM-DD (default 2009-01-01)")
    views.add_argument(
        "--size",
        type=size_argument,
        default=None,
        help="approximate total uncompressed bytes, e.g. 100MB (default: about 20000 lines/hour)",
    )
    views.add_argument(
        "--pages",
        type=positive_int,
        default=None,
        metavar="N",
        help="the page universe: exactly N distinct pages (language, title) the files draw from, so at most N "
        "appear in them; refused when --size takes more lines an hour than about a third of N (default 200000, "
        "grown when --size takes more)",
    )
    views.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    views.add_argument(
        "--views-per-hour",
        type=positive_int,
        default=None,
        help="views an hour counts at average traffic, however few lines it has (default: millions, as in the "
        "real dumps; see hop.gen.pageviews)",
    )
    views.add_argument("--no-gzip", action="store_true", help="write plain text files without .gz")
    views.set_defaults(func=_run_pageviews)
    return gen


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``gen`` without the rest of the hop CLI: ``main(["text", "out.txt", "--size", "10MB"])``."""
    parser = ArgumentParser(prog="hop")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["gen", *(sys.argv[1:] if argv is None else argv)])
    result: int = args.func(args)
    return result
