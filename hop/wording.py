"""Wording shared by the command line's messages."""

from __future__ import annotations

__all__ = ["counted", "percent", "percent_like", "percent_places", "progress_percent", "share"]


def counted(count: int, noun: str) -> str:
    """``count`` and ``noun`` in the singular or the plural (an ``s`` added): ``1 row``, ``0 rows``, ``1,000 rows``."""
    return f"{count:,} {noun}{'' if count == 1 else 's'}"


def percent_places(fraction: float, decimals: int = 1) -> int:
    """The decimals ``fraction`` needs as a percentage to be shown unrounded: at least ``decimals``, at most 4."""
    value = 100 * fraction
    places = decimals
    while places < 4 and abs(round(value, places) - value) > 1e-9:
        places += 1
    return places


def percent(fraction: float, decimals: int = 1) -> str:
    """A figure the user gave (a confidence, a bound) as a percentage, as given: ``decimals`` decimals, more where
    those would round it (``0.95``, 0 decimals: ``95%``; ``0.9995``: ``99.95%``, not ``100%``; ``0.0005``:
    ``0.05%``, not ``0.1%``)."""
    return f"{100 * fraction:.{percent_places(fraction, decimals)}f}%"


def percent_like(fraction: float, given: float) -> str:
    """A measured ``fraction`` as a percentage with the decimals :func:`percent` shows ``given`` with, the figure it
    is compared with (a half-width of 0.00042 against a bound of 0.0005: ``0.04%``, beside ``0.05%``); more, up to
    4, where a fraction other than ``given`` would read as it does (0.01004 over a bound of 0.01: ``1.004%``, not
    ``1.0%``, "over 1.0%")."""
    places = percent_places(given)
    while places < 4 and fraction != given and round(100 * fraction, places) == round(100 * given, places):
        places += 1
    return f"{100 * fraction:.{places}f}%"


def share(fraction: float, decimals: int = 0) -> str:
    """A measured share (of a window's cells, of the input) as a percentage that reads ``100%`` only when it is whole
    and ``0%`` only when it is none: ``decimals`` decimals, more where those would round it to either end, up to 4,
    past which it is cut short of the end (0.5: ``50%``; 0.999: ``99.9%``, not ``100%``, which a user reads as
    complete; 0.9999999: ``99.9999%``; 0.001: ``0.1%``)."""
    value = 100 * fraction
    places = decimals
    inside = 0 < fraction < 1
    while inside and places < 4 and not 0 < round(value, places) < 100:
        places += 1
    if inside:  # (past 4 decimals: held one last decimal inside the ends, rather than rounded onto one)
        step = 10.0**-places
        value = min(max(value, step), 100 - step)
    return f"{value:.{places}f}%"


def progress_percent(fraction: float) -> float:
    """``fraction`` as a percentage to one decimal for a progress bar, held at 99.9 until it is whole and at 0.1 once
    it is past none: a bar at ``100.0%`` with maps still running read as done (as :func:`share` words a share)."""
    value = round(100 * fraction, 1)
    if fraction < 1 and value >= 100:
        return 99.9
    if fraction > 0 and value <= 0:
        return 0.1
    return value
