"""Which command-line options the user gave, told from those left at their default.

``hop run`` refuses the options of the other kind of job (``--window`` on a batch run, ``--blocking`` with
``--source``, ``hop.cli``). Comparing an option's value with its default cannot tell ``--order sequential`` (given,
equal to the default) from no ``--order`` at all; an option declared with ``action=Given`` (takes a value) or
``action=GivenFlag`` (a switch) is noted as it is parsed instead, after argparse resolved the command line
(abbreviations, ``--option=value``), so nothing parses ``argv`` a second time.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

__all__ = ["Given", "GivenFlag", "flags_given"]

_NOTED = "options_given"
"""The namespace attribute mapping each given option's ``dest`` to its flag (absent: none given)."""


class Given(argparse.Action):
    """Stores the option's value, as ``action="store"`` does (a switch, :class:`GivenFlag`, its ``const``), and notes
    the option as given."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        setattr(namespace, self.dest, self.const if self.nargs == 0 else values)
        _note(namespace, self)


class GivenFlag(Given):
    """A switch, as ``action="store_true"``: ``True`` when given (``False`` otherwise), and noted as given."""

    def __init__(
        self, option_strings: Sequence[str], dest: str, default: bool = False, help: str | None = None
    ) -> None:
        super().__init__(option_strings, dest, nargs=0, const=True, default=default, help=help)


def _note(namespace: argparse.Namespace, action: argparse.Action) -> None:
    # A new dict each time: a namespace's attributes may be copied between namespaces (a subcommand's parser parses
    # into its own, then copies every attribute into the command's), never shared and mutated.
    noted = getattr(namespace, _NOTED, {})
    setattr(namespace, _NOTED, {**noted, action.dest: action.option_strings[-1]})


def flags_given(args: argparse.Namespace, dests: Sequence[str]) -> list[str]:
    """The flags (the long form, e.g. ``--no-view``) of the options among ``dests`` that the command line gave, in
    the order of ``dests``; only options declared with :class:`Given` or :class:`GivenFlag` are ever noted."""
    noted: dict[str, str] = getattr(args, _NOTED, {})
    return [noted[dest] for dest in dests if dest in noted]
