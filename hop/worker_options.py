"""The options of ``hop worker`` (also ``python -m hop.worker``, which runs it), defined once for both parsers.

``hop worker`` forwards what it parsed to ``hop.worker.main`` as arguments (:func:`to_argv`): the worker may
re-execute itself (with hash randomization off) and needs them as a command line. Kept free of the worker's own
imports, so that the ``hop`` command line starts fast.
"""

from __future__ import annotations

import argparse
import os
import socket

from hop.gen.cli import (
    COORDINATOR_HELP,
    TRANSIENT_RESOLVER_ERRORS,
    coordinator_address,
    interface_names,
    non_negative_float,
    non_negative_int,
    positive_int,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Every option of a worker, with its default."""
    cores = os.cpu_count() or 1
    parser.add_argument("--coordinator", type=coordinator_address, required=True, help=COORDINATOR_HELP)
    parser.add_argument(
        "--map-slots", type=positive_int, default=cores, help=f"map tasks run at once (default: cores, {cores})"
    )
    parser.add_argument(
        "--reduce-slots", type=positive_int, default=cores, help=f"reduce tasks run at once (default: cores, {cores})"
    )
    parser.add_argument(
        "--stream-slots",
        type=non_negative_int,
        default=2,
        help="slots for the tasks of continuous jobs only, e.g. the cluster monitor's source and reducer (default 2)",
    )
    parser.add_argument(
        "--host",
        type=listen_host,
        default=None,
        help="the address other hosts reach this one at, which its reducers bind and advertise (default: the one "
        "this host reaches the coordinator from)",
    )
    parser.add_argument(
        "--name", default=None, help="the worker's name (default HOST-PID); a worker restarted under it replaces it"
    )
    parser.add_argument(
        "--spill-dir",
        type=spill_root,
        default=None,
        help="parent directory for spill files, an existing one (default: the temp dir)",
    )
    parser.add_argument("--rack", default="rack-0", help="rack label of this host, for the cluster monitor (rack-0)")
    parser.add_argument(
        "--sample-interval",
        type=non_negative_float,
        default=1.0,
        help="seconds between metric samples for the cluster monitor (default 1; 0: no sampling)",
    )
    parser.add_argument(
        "--sample-scope",
        choices=["host", "process"],
        default="host",
        help="sample the whole host (default), or only this worker's process tree (several workers on one machine)",
    )
    parser.add_argument(
        "--host-label",
        default=None,
        help="the host name the monitor shows (default: the host name, or with "
        "--sample-scope process the worker's name)",
    )


def listen_host(text: str) -> str:
    """``--host``: an address of this host (or a network interface's name, as ZeroMQ takes it), where the worker's
    reduce tasks (and its metric samples) listen. Another host's address, or a name that does not resolve, failed the
    worker as it started with ZeroMQ's ``No such device`` or ``Cannot assign requested address`` traceback, or
    without sampling, every reduce task it ran, four attempts each. A resolver that cannot answer now is no usage
    error (ZeroMQ resolves it later)."""
    if text in interface_names():
        return text
    remedy = "give the address other hosts reach this one at (without --host: the one it reaches the coordinator from)"
    try:
        address = socket.getaddrinfo(text, 0, socket.AF_INET, socket.SOCK_STREAM)[0][4][0]
    except socket.gaierror as error:
        if error.errno in TRANSIENT_RESOLVER_ERRORS:
            return text
        message = f"{text} does not resolve to an IPv4 address ({error.strerror}); {remedy}"
        raise argparse.ArgumentTypeError(message) from None
    except UnicodeError as error:  # a label too long for IDNA
        raise argparse.ArgumentTypeError(f"{text} is no host name ({error}); {remedy}") from None
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((address, 0))  # (a free port: nothing is taken from anyone)
        except OSError as error:
            named = text if address == text else f"{text} ({address})"
            raise argparse.ArgumentTypeError(
                f"{named} is not an address of this host ({error.strerror}), where its reduce tasks listen; {remedy}"
            ) from None
    return text


def spill_root(text: str) -> str:
    """``--spill-dir``: an existing directory this user can write in, where the worker makes its own spill directory
    as it starts (a missing one failed the worker there, with a traceback)."""
    if not os.path.exists(text):
        raise argparse.ArgumentTypeError(f"{text} does not exist: create it, or give an existing directory")
    if not os.path.isdir(text):
        raise argparse.ArgumentTypeError(f"{text} is not a directory: give the directory to hold the spill files")
    if not os.access(text, os.W_OK | os.X_OK):
        raise argparse.ArgumentTypeError(f"{text} is not writable by this user: give a directory it can write in")
    return text


def to_argv(args: argparse.Namespace) -> list[str]:
    """The ``python -m hop.worker`` arguments that give the options in ``args`` (parsed by :func:`add_arguments`)."""
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    argv: list[str] = []
    for action in parser._actions:
        value = getattr(args, action.dest, None)
        if action.option_strings and action.dest != "help" and value is not None:
            argv += [action.option_strings[0], str(value)]
    return argv
