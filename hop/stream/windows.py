"""Windows and panes of a continuous query: the arithmetic, with no state.

A window has a *range* R and a *slide* S in one unit: seconds of event time (``"60s"``, ``"500ms"``, ``"2m"``),
records (``"1000r"``) or bytes (``"64KB"``, ``"1000b"``). A tumbling window has S = R. Every window is the union of
consecutive *panes* of size P = gcd(R, S), so a record is mapped and combined once, into one pane, however many
windows it falls in (C2, ``004`` chapter 3): window ``w`` covers panes ``[w * S/P, w * S/P + R/P)`` and spans
``[w * S, w * S + R)`` in the unit.

Positions: for time windows a record's position is its event time (seconds since the epoch); for record and byte
windows it is the record's ordinal, or the byte offset of its start, *in its own source* (each source counts from 0,
so a window of 1000 records holds the 1000 records of that range from every source).

Times are handled in integer microseconds, so that gcd and pane boundaries are exact.
"""

from __future__ import annotations

import decimal
import fractions
import functools
import math
import re
from dataclasses import dataclass

UNITS = ("time", "records", "bytes")

_TIME_UNITS = {"us": 1, "ms": 1_000, "s": 1_000_000, "m": 60_000_000, "h": 3_600_000_000}
_BYTE_UNITS = {"b": 1, "kb": 1 << 10, "mb": 1 << 20, "gb": 1 << 30}
_PATTERN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]+)\s*$")


class WindowSpecError(ValueError):
    """A window or slide that cannot be used; the message says what to write instead."""


def parse_extent(text: str) -> tuple[str, int]:
    """``"60s"`` -> ``("time", 60_000_000)`` (microseconds); ``"1000r"`` -> ``("records", 1000)``;
    ``"64KB"`` -> ``("bytes", 65536)``."""
    match = _PATTERN.match(str(text))
    if not match:
        raise WindowSpecError(
            f"cannot read {text!r} as a window extent: write a number and a unit, e.g. 60s, 500ms, 1000r, 64KB"
        )
    number, unit = float(match.group(1)), match.group(2).lower()
    if unit in _TIME_UNITS:
        kind, amount = "time", number * _TIME_UNITS[unit]
    elif unit in ("r", "records", "rec"):
        kind, amount = "records", number
    elif unit in _BYTE_UNITS:
        kind, amount = "bytes", number * _BYTE_UNITS[unit]
    else:
        raise WindowSpecError(
            f"unknown unit {match.group(2)!r} in {text!r}: use us, ms, s, m, h (time), r (records) or b, KB, MB, GB"
        )
    if amount != int(amount) or amount <= 0:
        raise WindowSpecError(f"window extent {text!r} must be a positive whole number of {kind} units")
    return kind, int(amount)


def parse_duration(text: str) -> float:
    """A duration option in seconds, 0 or more: ``"2s"`` -> ``2.0``, ``"500ms"`` -> ``0.5``, ``"0s"`` -> ``0.0``, and a
    plain number is seconds (``"1.5"``). Unlike a window extent, a duration may be zero (``--lateness 0s``, the
    default, was refused as "window extent '0s' must be a positive whole number")."""
    if str(text).strip().startswith("-"):
        raise WindowSpecError(f"a duration must be 0 or more seconds, got {text!r}")
    try:
        seconds = float(text)
    except ValueError:
        match = _PATTERN.match(str(text))
        unit = match.group(2).lower() if match else None
        if match is None or unit not in _TIME_UNITS:
            raise WindowSpecError(
                f"cannot read {text!r} as a duration: write a number and a unit, e.g. 2s, 500ms, 5m"
            ) from None
        seconds = float(match.group(1)) * _TIME_UNITS[unit] / 1_000_000
    if not seconds >= 0 or math.isinf(seconds):
        raise WindowSpecError(f"a duration must be 0 or more seconds, got {text!r}")
    return seconds


MANY_PANES = 1_000
"""A window of more panes than this is most likely a mistyped slide (``--window 10s --slide 1ms``) or a slide that
does not divide the window (``10s`` by ``3001ms``: their gcd, 1 ms, is the pane): every window merges all its panes."""

MAX_WINDOWS_PER_RECORD = 3_600
"""The most windows one record may fall in (window / slide, rounded up): ``--window 1h --slide 1s``. Stopping a job
writes every window that holds one of its open panes, that many, at once: 3,600 took 67 s on the build machine (at
about 54 windows a second, within the 120 s a stop may take to drain); ``--window 10s --slide 1ms`` (10,000) fell
behind a stream of 100 records a second within seconds and did not stop in 40 s, and ``--window 1h --slide 1ms``
(3,600,000) would take hours to stop. Past this a job is refused."""

MANY_WINDOWS_PER_RECORD = 1_000
"""Past this many windows a record, a job is warned that stopping it writes that many windows at once (``10s`` by
``10ms``, 1,000: 8 s to stop on the build machine)."""


MAX_EVENT_SECONDS = 1e100
"""An event time's magnitude must be below this many seconds: the folder of a window is named by its start in
microseconds past year 9999 (``E`` and its digits, :meth:`WindowSpec.label`), and a stamp of 1e300 made a name of
302 characters, which no file system takes (every reduce attempt failed on it, and so the job). Far past any clock's
unit read in the wrong scale (nanoseconds read as seconds are some 1.7e18); such a record is a bad record."""


def label_order(label: str) -> str:
    """A key that sorts window folder names (:meth:`WindowSpec.label`) by window start: a time label of a whole
    second has no fraction, and "." sorts before "Z", so ``...T143000Z`` sorted after ``...T143000.500000Z``."""
    return label[:-1] + ".000000Z" if label.endswith("Z") and "." not in label else label


_DECIMAL_BELOW = 2.0**50
"""Scaled stamps (microseconds) below which a product just under a whole microsecond is decided by the stamp's
decimal text (:meth:`WindowSpec.scale`): past it a product's ulp is a quarter microsecond or more."""


@dataclass(frozen=True)
class WindowSpec:
    """Range and slide of the windows, in integer units (microseconds for time)."""

    unit: str
    size: int
    """The range R."""
    slide: int

    def __post_init__(self) -> None:
        if self.unit not in UNITS:
            raise WindowSpecError(f"window unit must be one of {UNITS}, got {self.unit!r}")
        if self.size <= 0 or self.slide <= 0:
            raise WindowSpecError("window range and slide must be positive")
        if self.slide > self.size:
            raise WindowSpecError(
                "a slide longer than the window would skip records between windows; use a slide <= the window"
            )

    @classmethod
    def parse(cls, window: str, slide: str | None = None) -> WindowSpec:
        """``WindowSpec.parse("60s", "10s")``; no slide means tumbling windows."""
        unit, extent = parse_extent(window)
        step = extent
        if slide is not None:
            slide_unit, step = parse_extent(slide)
            if slide_unit != unit:
                raise WindowSpecError(f"window {window!r} and slide {slide!r} must use the same kind of unit")
        return cls(unit, extent, step)

    # The arithmetic ------------------------------------------------------------------------------------------
    @functools.cached_property
    def pane(self) -> int:
        """Pane size: gcd(range, slide) (cached: ``pane_of`` runs for every record)."""
        return math.gcd(self.size, self.slide)

    @functools.cached_property
    def panes_per_window(self) -> int:
        return self.size // self.pane

    @functools.cached_property
    def panes_per_slide(self) -> int:
        return self.slide // self.pane

    @property
    def tumbling(self) -> bool:
        return self.size == self.slide

    def scale(self, position: float) -> int:
        """A position in integer units: event seconds -> microseconds; ordinals and offsets unchanged.

        A stamp is floored to the microsecond *as written*: ``4.1`` is 4,100,000 us, in the window starting at 4.1 s,
        though the float nearest 4.1 lies just below it and ``4.1 * 1e6`` is 4099999.9999999995 (flooring that put
        the record in the window ending at 4.1, whose end excludes it). A product within two ulps below a whole
        microsecond is decided by the stamp's shortest decimal text (``repr``, what a JSON or msgpack producer
        wrote); any other is floored as it is, so the exact path costs only stamps just below a boundary. Past
        2**50 us (2005) a product's ulp is a quarter microsecond or more and the band would hold most stamps (every
        arrival time): there it is floored as it is, which for stamps of up to 6 decimals until 2**51 us (2041)
        is exact already (none of 200,000 was off)."""
        if self.unit != "time":
            return int(position)
        scaled = position * 1_000_000
        if isinstance(scaled, int):  # an int stamp: exact already
            return scaled
        if math.isinf(scaled):  # a finite stamp past ~1.8e302 s: its microseconds, exactly, as an int
            return math.floor(fractions.Fraction(position) * 1_000_000)
        floor = math.floor(scaled)
        # (Below 2**50 a product's ulp is at most 1/8 us; compared first, as it decides most stamps at one test.)
        if abs(scaled) < _DECIMAL_BELOW and scaled != floor and math.ceil(scaled) - scaled <= 2 * math.ulp(scaled):
            return math.floor(decimal.Decimal(repr(float(position))) * 1_000_000)
        return floor

    def pane_of(self, position: float) -> int:
        """The pane a record at ``position`` (event seconds, ordinal or byte offset) belongs to."""
        return self.scale(position) // self.pane

    def panes_of_window(self, window: int) -> range:
        first = window * self.panes_per_slide
        return range(first, first + self.panes_per_window)

    def windows_of_pane(self, pane: int) -> range:
        """The windows containing ``pane``: w with w*k_s <= pane < w*k_s + k_r."""
        ks, kr = self.panes_per_slide, self.panes_per_window
        return range(-((kr - 1 - pane) // ks), pane // ks + 1)

    def first_window_of_pane(self, pane: int) -> int:
        first = self.windows_of_pane(pane).start
        return max(first, 0) if self.unit != "time" else first

    def last_pane(self, window: int) -> int:
        return window * self.panes_per_slide + self.panes_per_window - 1

    def bounds(self, window: int) -> tuple[float, float]:
        """[start, end) of a window in the user's terms: event seconds for time, ordinals or bytes otherwise."""
        start, end = window * self.slide, window * self.slide + self.size
        if self.unit == "time":
            return start / 1_000_000, end / 1_000_000
        return start, end

    def label(self, window: int) -> str:
        """The directory name of a window's results: free of ':' (which Hadoop-style paths reject), and in start
        order by name (``ls``) among one job's windows. Time: UTC ``YYYYMMDDTHHMMSS[.ffffff]Z``, the fraction always
        there when the slide is not whole seconds (a whole second's ``...T143000Z`` sorted after
        ``...T142959.500000Z``, since "." sorts before "Z"), or past year 9999 (a stamp in the wrong unit, say) ``E``
        and the start in microseconds, 20 digits (sorting after every date); records and bytes: the zero-padded
        start. :func:`label_order` sorts older outputs' names too."""
        start = window * self.slide
        if self.unit != "time":
            return f"{start:015d}"
        import datetime

        try:
            moment = datetime.datetime.fromtimestamp(start / 1_000_000, tz=datetime.UTC)
        except (OverflowError, ValueError, OSError):
            return f"E{start:020d}"
        text = moment.strftime("%Y%m%dT%H%M%S")
        if start % 1_000_000 or self.slide % 1_000_000:
            text += f".{start % 1_000_000:06d}"
        return text + "Z"

    def describe(self) -> dict[str, object]:
        """For ``_window.json`` and the job report."""
        scale = 1_000_000 if self.unit == "time" else 1
        return {
            "unit": "seconds" if self.unit == "time" else self.unit,
            "range": self.size / scale,
            "slide": self.slide / scale,
            "pane": self.pane / scale,
        }

    def many_panes_warning(self) -> str | None:
        """What to tell the user of windows of more than :data:`MANY_PANES` panes; None for fewer."""
        if self.panes_per_window <= MANY_PANES:
            return None
        return (
            f"each window holds {self.panes_per_window:,} panes of {self._amount(self.pane)} (a pane "
            f"is the greatest common divisor of window and slide) and merges them all, so the query may fall behind "
            f"its sources: a slide that divides the window into at most {MANY_PANES:,} panes keeps it quick"
        )

    @property
    def windows_per_record(self) -> int:
        """How many windows a record falls in (at most): window / slide, rounded up."""
        return -(-self.size // self.slide)

    def too_many_windows(self) -> str | None:
        """Why these windows are refused, with what to give instead: a record in more than
        :data:`MAX_WINDOWS_PER_RECORD` windows; None when they are not."""
        if self.windows_per_record <= MAX_WINDOWS_PER_RECORD:
            return None
        least = -(-self.size // MAX_WINDOWS_PER_RECORD)  # (the smallest slide allowed, in the spec's own unit)
        windows = f"{self.windows_per_record:,} windows"
        return (
            f"windows of {self._amount(self.size)} sliding by {self._amount(self.slide)} put every record in {windows} "
            f"(window / slide): the job would write a window every {self._amount(self.slide)} of the stream, and "
            f"stopping it would write the {windows} holding its open panes at once (a few dozen to a few hundred a "
            f"second), so it could neither keep up nor stop. At most {MAX_WINDOWS_PER_RECORD:,} windows a record are "
            f"allowed: give a slide of at least {self._amount(least)} (window / {MAX_WINDOWS_PER_RECORD:,}), or no "
            "--slide for tumbling windows"
        )

    def _amount(self, extent: int) -> str:
        """An extent in words: ``0.001 seconds``, ``1 record``, ``64 bytes``."""
        if self.unit == "time":
            return f"{extent / 1_000_000:g} second{'' if extent == 1_000_000 else 's'}"
        return f"{extent:,} {self.unit.removesuffix('s')}{'' if extent == 1 else 's'}"

    def many_windows_warning(self) -> str | None:
        """What to tell the user of windows a record falls in more than :data:`MANY_WINDOWS_PER_RECORD` of (and
        at most :data:`MAX_WINDOWS_PER_RECORD`, past which they are refused); None for fewer."""
        if not MANY_WINDOWS_PER_RECORD < self.windows_per_record <= MAX_WINDOWS_PER_RECORD:
            return None
        return (
            f"every record falls in {self.windows_per_record:,} windows (window / slide), so stopping the job writes "
            f"the {self.windows_per_record:,} windows holding its open panes at once, which may take a minute or more"
        )

    def to_wire(self) -> dict[str, object]:
        return {"unit": self.unit, "range": self.size, "slide": self.slide}

    @classmethod
    def from_wire(cls, data: dict[str, object]) -> WindowSpec:
        return cls(str(data["unit"]), int(data["range"]), int(data["slide"]))  # type: ignore[call-overload]
