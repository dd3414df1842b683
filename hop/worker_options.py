"""The options of ``hop worker`` (also ``python -m hop.worker``, which runs it), defined once for both parsers.

``hop worker`` forwards what it parsed to ``hop.worker.main`` as arguments (:func:`to_argv`): the worker may
re-execute itself (with hash randomization off) and needs them as a command line. Kept free of the worker's own
imports, so that the ``hop`` command line starts fast.
"""

from __future__ import annotations

import argparse
import os

from hop.gen.cli import COORDINATOR_HELP, coordinator_address, non_negative_float, non_negative_int, positive_int


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
