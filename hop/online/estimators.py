"""Estimates of a group's final value, with a confidence interval, from the input chunks seen so far.

The model (written out with its assumptions in ``docs/online.md``): the input is cut into chunks; each chunk belongs
to one *stratum* (the whole input is one stratum unless the job says otherwise). With ``--order random`` the chunks
seen so far are a simple random sample, without replacement, of the chunks of each stratum. A group draws from one
stratum. For a group, ``x_c`` is its contribution in chunk ``c`` (0 when the group does not occur there), so its
final Sum is ``sum over all N chunks of x_c``. From the ``n`` chunks seen we know ``S = sum x_c`` and
``Q = sum x_c**2`` and estimate:

- Sum and Count: the ratio estimator scaled by bytes, ``T = B * S / b`` with ``b`` the bytes of the chunks seen and
  ``B`` those of all ``N``; its linearised variance is ``N**2 * (1 - n/N) * s_d**2 / n``, ``s_d**2`` the sample
  variance of the residuals ``d_c = x_c - R * b_c`` (``R = S / b``, ``b_c`` chunk ``c``'s bytes; finite-population
  correction ``1 - n/N``), times ``(B/N)**2 / (b/n)**2`` (as the Mean's variance divides by the sample's mean count:
  a sample of small chunks is scaled up more, and so is its spread). Chunks differ in size (a file's last chunk, a
  compressed file read whole, small files beside large ones), and a group's contribution follows its chunk's size:
  the expansion estimator ``N * S / n`` ignored that, so its estimates were off by the size mix of the chunks read
  (a median error of 1.6% at 10% of files of 1 KB .. 10 MB, 0.4% by bytes: ``docs/online.md``), and biased low
  when the chunks finished first were the small ones. With equal chunks the two are the same estimate and interval.
  Without sizes (``None``) every chunk counts as one byte: the expansion estimator.
- Mean: the ratio ``R = S_y / S_x`` of the per-chunk sums of values (``y``) and counts (``x``), with the linearised
  variance ``(1 - n/N) * m / (m - 1) * sum d_c**2 / S_x**2`` where ``d_c = y_c - R * x_c`` and ``m`` the chunks the
  group occurred in (below). A Mean does not scale by the chunks seen, so its variance is that of a sample of the
  ``m`` chunks holding the group (every other ``d_c`` is 0): the textbook form over all ``n`` chunks,
  ``(1 - n/N) * s_d**2 / (n * xbar**2)``, is ``(n/(n-1)) / (m/(m-1))`` of it, too small for a group seen in few
  chunks (half for 2, two thirds for 3: a group with one record in each of 3 chunks got ``s/sqrt(3)`` times
  ``sqrt(2/3)``, and its 95% intervals held 93% of the time, 95% now: ``tests/test_online_units.py``).

The interval is ``estimate +- t * sqrt(variance)`` with Student's t quantile for ``m - 1`` degrees of freedom, ``m``
the number of seen chunks the group *occurred* in (at most ``n``; for a total, those where its contribution is not
0): a group's ``x_c`` is 0 in every other chunk, so its sample variance rests on those ``m`` chunks, not on all ``n``
(a group seen in one chunk of 50 had a Mean interval of width 0, ``d_c`` being 0 in every chunk, and the t quantile
of 49 degrees of freedom for one occurring in two). With ``n == N`` the value is exact (interval of width 0); with
``m < 2`` there is no interval (``None`` bounds), nor when the residuals' squares sum to 0: a spread of 0 seen says
nothing of the spread unseen, and the interval of width 0 it gave read as exact (the Mean of a 0/1 flag seen as 0
in every record so far; the sum is a difference of sums of squares, so values alike but not exact in binary, 0.1,
may leave a trace of rounding and a very narrow interval instead).

For a Sum or a Mean the interval is corrected for skewness (a Count's holds its level without: docs/online.md,
Calibration): skewed values make a few chunks carry much of a group's total, and a sample that missed them has an
estimate and a spread both too low, so the symmetric interval falls short above far more often than below (95%
intervals held 64-93% of the time on lognormal and Pareto values). From the residuals' sum of cubes (``sum d_c**3``,
a combination of the power sums ``sum x**3``, ``sum x**2 b``, ``sum x b**2`` and the stratum's ``sum b**3`` for a
total, ``sum y**3``, ``sum y**2 x``, ``sum y x**2``, ``sum x**3`` for a mean, which the reducer's summaries carry
and merge as they do the squares) comes the estimate's skewness, and the interval is Hall's transformation of the
t interval (:func:`_arms_of`): the arm on the side of the skew longer, the other shorter, both together never
shorter than the t interval. Below ``MIN_SKEW_SAMPLES`` chunks occurred in, or when the cubes are lost in rounding
or overflow a float, the interval is the t interval.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

__all__ = ["Bytes", "Estimate", "estimate_mean", "estimate_means", "estimate_total", "estimate_totals", "t_quantile"]


@dataclass(frozen=True)
class Estimate:
    """An estimate of a group's final value; ``low``/``high`` are ``None`` when no interval can be given yet."""

    value: float
    low: float | None
    high: float | None
    final: bool
    """True when every chunk of the group's stratum has been seen: the value is exact."""

    @property
    def relative_half_width(self) -> float | None:
        """Half the interval's width over the estimate's magnitude (0 when exact, ``None`` without an interval)."""
        if self.final:
            return 0.0
        if self.low is None or self.high is None:
            return None
        half = (self.high - self.low) / 2
        return half / abs(self.value) if self.value else (0.0 if half == 0 else math.inf)


def _central_t_probability(t: float, degrees_of_freedom: int) -> float:
    """``P(|T| <= t)`` for Student's t with integer degrees of freedom (Abramowitz and Stegun 26.7.3-4)."""
    theta = math.atan(t / math.sqrt(degrees_of_freedom))
    sine, cosine = math.sin(theta), math.cos(theta)
    c2 = cosine * cosine
    term = total = 1.0
    if degrees_of_freedom % 2:
        for k in range(1, (degrees_of_freedom - 3) // 2 + 1):
            term *= 2 * k / (2 * k + 1) * c2
            total += term
        return 2 / math.pi * (theta + (sine * cosine * total if degrees_of_freedom > 1 else 0.0))
    for k in range(1, (degrees_of_freedom - 2) // 2 + 1):
        term *= (2 * k - 1) / (2 * k) * c2
        total += term
    return sine * total


@lru_cache(maxsize=4096)
def t_quantile(degrees_of_freedom: int, confidence: float) -> float:
    """The two-sided Student t quantile: ``P(|T| <= q) == confidence`` for ``degrees_of_freedom`` (bisection on
    the exact distribution function; a few milliseconds at most, cached)."""
    if degrees_of_freedom < 1:
        raise ValueError(f"degrees of freedom must be at least 1, got {degrees_of_freedom}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be between 0 and 1, got {confidence}")
    low, high = 0.0, 2.0
    while _central_t_probability(high, degrees_of_freedom) < confidence:
        low, high = high, high * 2
    for _ in range(100):
        middle = (low + high) / 2
        if _central_t_probability(middle, degrees_of_freedom) < confidence:
            low = middle
        else:
            high = middle
        if high - low < 1e-12 * high:
            break
    return (low + high) / 2


@dataclass(frozen=True)
class Bytes:
    """A group's byte moments for the ratio estimator: ``cross`` is ``sum x_c * b_c`` over the chunks seen; ``seen``
    and ``squares`` are ``sum b_c`` and ``sum b_c**2`` over the chunks seen of its stratum, ``total`` the bytes of
    the whole stratum."""

    cross: float
    seen: float
    squares: float
    total: float
    cubes: float | None = None
    """``sum b_c**3`` over the chunks seen of its stratum, for the interval's skewness (``None``: not known, no
    skewness correction)."""


def estimate_total(
    total: float,
    squares: float,
    seen: int,
    chunks: int,
    confidence: float = 0.95,
    occurred: int | None = None,
    sizes: Bytes | None = None,
    thirds: tuple[float, float, float] | None = None,
) -> Estimate:
    """Estimate a Sum or Count: ``total``/``squares`` are the sum and sum of squares of the group's per-chunk
    contributions over the ``seen`` chunks seen of the ``chunks`` in its stratum; ``occurred`` is how many of them
    the group occurred in (``None``: all of them), which sets the interval's degrees of freedom; ``sizes`` the byte
    moments (``None``: chunks of one size); ``thirds`` are ``sum x**3``, ``sum x**2 * b`` and ``sum x * b**2``
    over the chunks seen, for the interval's skewness correction (``None``: the symmetric t interval)."""
    if chunks < 1 or not 0 < seen <= chunks:
        raise ValueError(f"need 0 < seen <= chunks, got seen={seen}, chunks={chunks}")
    if seen == chunks:
        return Estimate(float(total), float(total), float(total), True)
    if sizes is None:
        sizes = Bytes(total, seen, seen, chunks, seen)
    ratio = total / sizes.seen if sizes.seen else 0.0
    value = sizes.total * ratio
    samples = _samples(seen, occurred)
    if samples < 2:
        return Estimate(value, None, None, False)
    residual_squares = squares - 2 * ratio * sizes.cross + ratio * ratio * sizes.squares
    if residual_squares <= 0:  # no spread seen (see the module docstring)
        return Estimate(value, None, None, False)
    mean_bytes = sizes.seen / seen
    variance = (1 - seen / chunks) * residual_squares / (seen - 1) / seen * (sizes.total / mean_bytes) ** 2
    skew = 0.0
    if thirds is not None and sizes.cubes is not None:
        cube, square_size, size_square = thirds
        cubes, magnitude = _residual_cubes(cube, square_size, size_square, sizes.cubes, ratio)
        skew = _skew(cubes, magnitude, residual_squares, seen, samples)
    down, up = _arms(t_quantile(samples - 1, confidence), skew)
    se = math.sqrt(variance)
    return Estimate(value, value - down * se, value + up * se, False)


def estimate_mean(
    counts: float,
    sums: float,
    count_squares: float,
    cross: float,
    sum_squares: float,
    seen: int,
    chunks: int,
    confidence: float = 0.95,
    occurred: int | None = None,
    thirds: tuple[float, float, float, float] | None = None,
) -> Estimate:
    """Estimate a Mean as the ratio of per-chunk sums (``y``) to per-chunk counts (``x``).

    Arguments are ``sum x``, ``sum y``, ``sum x**2``, ``sum x*y``, ``sum y**2`` over the ``seen`` chunks, how many
    of them the group occurred in (``None``: all of them) and ``sum x**3``, ``sum x**2 y``, ``sum x y**2``,
    ``sum y**3`` for the interval's skewness correction (``None``: the symmetric t interval).
    """
    if chunks < 1 or not 0 < seen <= chunks:
        raise ValueError(f"need 0 < seen <= chunks, got seen={seen}, chunks={chunks}")
    if counts <= 0:
        raise ValueError("a mean needs at least one value")
    ratio = sums / counts
    if seen == chunks:
        return Estimate(ratio, ratio, ratio, True)
    samples = _samples(seen, occurred)
    if samples < 2:
        return Estimate(ratio, None, None, False)
    residual_squares = sum_squares - 2 * ratio * cross + ratio * ratio * count_squares
    if residual_squares <= 0:  # no spread seen (see the module docstring)
        return Estimate(ratio, None, None, False)
    # Over the ``samples`` chunks the group occurred in (every other chunk's residual is 0): see the module docstring.
    variance = (1 - seen / chunks) * residual_squares * samples / ((samples - 1) * counts * counts)
    skew = 0.0
    if thirds is not None:
        xxx, xxy, xyy, yyy = thirds
        cubes, magnitude = _residual_cubes(yyy, xyy, xxy, xxx, ratio)
        skew = _skew(cubes, magnitude, residual_squares, samples, samples)
    down, up = _arms(t_quantile(samples - 1, confidence), skew)
    se = math.sqrt(variance)
    return Estimate(ratio, ratio - down * se, ratio + up * se, False)


def _residual_cubes(yyy: Any, yyx: Any, yxx: Any, xxx: Any, ratio: Any) -> tuple[Any, Any]:
    """``sum (y - ratio x)**3`` from the power sums ``sum y**3``, ``sum y**2 x``, ``sum y x**2`` and ``sum x**3``
    (numbers, or numpy arrays per group), and the magnitude of the four terms it is the difference of, against
    which :data:`ROUNDING` tells a residual skew from rounding. (A total's residuals are ``x - ratio b`` over chunk
    bytes ``b``; a mean's ``y - ratio x`` over counts ``x``.)"""
    terms = (yyy, 3 * ratio * yyx, 3 * ratio * ratio * yxx, ratio**3 * xxx)
    return terms[0] - terms[1] + terms[2] - terms[3], sum(abs(term) for term in terms)


MIN_SKEW_SAMPLES = 5
"""Chunks a group must occur in before its interval is corrected for skewness: below, the sample skewness of 2 to
4 numbers says next to nothing (with 2 it is 0 by construction for a Mean), and the interval stays the t interval."""

SKEW_SHRINK = 0.5
"""The sample skewness is moved towards 0 by this many of its standard errors under symmetric data,
``sqrt(6 / m)`` (and set to 0 within them): the skewness of a few chunks of symmetric values is noise of that size
(1.0 for 6 chunks), which moved and widened their intervals for nothing. Measured (``bench.online_coverage``, 50
trials, seeds 1-2): unshrunk, normal values' Mean intervals held 0.944 (0.949 uncorrected) and were 3-5% wider; at
0.5, 0.947 and 1% wider, while lognormal and Pareto values kept most of the gain (docs/online.md, Calibration)."""

ROUNDING = 1e-9
"""A residuals' sum of cubes within this fraction of the magnitude of the power sums it is the difference of is
taken as 0 (no correction): it is rounding, not skewness (a group whose chunks all add about the same)."""


def _skews(cubes: Any, magnitude: Any, squares: Any, count: Any, samples: Any) -> Any:
    """The skewness of an estimate (numpy, per group): the sample skewness of its ``count`` residuals, whose sum of
    cubes is ``cubes`` (the difference of power sums of total ``magnitude``) and of squares ``squares``, shrunk
    (:data:`SKEW_SHRINK`) and over ``sqrt(count)``, as the skewness of a mean of ``count`` draws is. 0 (the t
    interval) below :data:`MIN_SKEW_SAMPLES` chunks occurred in (``samples``), when the cubes are lost in rounding,
    or not finite (a value whose cube overflows a float)."""
    import numpy as np

    cubes, magnitude, squares = (np.asarray(a, dtype=float) for a in (cubes, magnitude, squares))
    count, samples = np.maximum(np.asarray(count, dtype=float), 1), np.asarray(samples, dtype=float)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        usable = (samples >= MIN_SKEW_SAMPLES) & np.isfinite(cubes) & np.isfinite(magnitude) & (squares > 0)
        usable &= np.abs(cubes) > ROUNDING * magnitude
        gamma = (cubes / count) / (squares / count) ** 1.5
        noise = SKEW_SHRINK * np.sqrt(6 / np.maximum(samples, 1))
        skew = np.sign(gamma) * np.maximum(np.abs(gamma) - noise, 0) / np.sqrt(count)
    return np.where(usable & np.isfinite(skew), skew, 0.0)


def _arms_of(quantile: Any, skew: Any) -> tuple[Any, Any]:
    """The interval's arms below and above the estimate, in standard errors (numpy, per group), by Hall's
    transformation (*On the removal of skewness by transformation*, 1992) of the Studentized estimate
    ``T = (estimate - truth) / se`` with the estimate's skewness ``a``: ``g(T) = T + a T²/3 + a²T³/27 + a/6`` is
    about as symmetric as the t distribution, and monotone, so the interval is ``estimate - se * g⁻¹(±q)``:
    ``g⁻¹(y) = 3 ((1 + a (y - a/6))^(1/3) - 1) / a``. With ``a = 0`` both arms are ``q`` (the t interval); a right
    skew (``a > 0``: a sample that missed a rare large contribution has an estimate and a spread both too low)
    lengthens the upper arm and shortens the lower, and the two together are never shorter than ``2q``. ``a`` is
    held within the range where ``1 - a (q + a/6) >= 0``: past it the cube root's argument changes sign and the
    long arm *shrinks* as the skewness grows (at most ``3/a`` then: 6.2 standard errors for q = 2)."""
    import numpy as np

    q, a = np.asarray(quantile, dtype=float), np.asarray(skew, dtype=float)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        limit = 3 * (np.sqrt(q * q + 2 / 3) - q)  # (the root of a²/6 + q a - 1 = 0)
        a = np.clip(a, -limit, limit)
        plain = np.abs(a) < 1e-12
        u = np.where(plain, 1.0, a / 3)
        down = np.where(plain, q, (np.cbrt(1 + 3 * u * (q - a / 6)) - 1) / u)
        up = np.where(plain, q, (1 - np.cbrt(1 - 3 * u * (q + a / 6))) / u)
    return down, up


def _skew(cubes: float, magnitude: float, squares: float, count: int, samples: int) -> float:
    """:func:`_skews` of one group."""
    return float(_skews(cubes, magnitude, squares, count, samples))


def _arms(quantile: float, skew: float) -> tuple[float, float]:
    """:func:`_arms_of` of one group."""
    down, up = _arms_of(quantile, skew)
    return float(down), float(up)


def _samples(seen: int, occurred: int | None) -> int:
    """The chunks a group's interval rests on: those it occurred in (see the module docstring)."""
    return seen if occurred is None else min(seen, occurred)


def _quantiles(samples: Any, confidence: float) -> Any:
    """Per group the t quantile for ``samples - 1`` degrees of freedom (NaN, no interval, below 2 samples)."""
    import numpy as np

    table = {int(k): (t_quantile(int(k) - 1, confidence) if k >= 2 else math.nan) for k in np.unique(samples)}
    return np.array([table[int(k)] for k in samples], dtype=float)


def _samples_of(seen: Any, occurrences: Sequence[int] | None) -> Any:
    import numpy as np

    return seen if occurrences is None else np.minimum(seen, np.asarray(occurrences, dtype=float))


def estimate_totals(
    totals: Sequence[float],
    squares: Sequence[float],
    seen: Sequence[int],
    chunks: Sequence[int],
    confidence: float,
    occurrences: Sequence[int] | None = None,
    sizes: Sequence[Bytes] | None = None,
    thirds: Sequence[tuple[float, float, float]] | None = None,
) -> tuple[list[float], list[float | None], list[float | None], list[bool]]:
    """:func:`estimate_total` for many groups at once (numpy): values, lows, highs (``None`` without an interval)
    and finals, in the order given. Every ``seen`` must be at least 1; ``occurrences``, ``sizes`` and ``thirds`` as
    ``occurred``, ``sizes`` and ``thirds`` there (``sizes`` and ``thirds`` for every group or none)."""
    import numpy as np

    s = np.asarray(totals, dtype=float)
    q = np.asarray(squares, dtype=float)
    n = np.asarray(seen, dtype=float)
    big_n = np.asarray(chunks, dtype=float)
    if sizes is None:
        cross, seen_bytes, byte_squares, total_bytes, byte_cubes = s, n, n, big_n, n
    else:
        moments = np.asarray(
            [(b.cross, b.seen, b.squares, b.total, math.nan if b.cubes is None else b.cubes) for b in sizes],
            dtype=float,
        ).reshape(-1, 5)
        cross, seen_bytes, byte_squares, total_bytes, byte_cubes = moments.T
    final = n >= big_n
    samples = _samples_of(n, occurrences)
    t = _quantiles(samples, confidence)
    # A group's infinite value (or NaN) makes its estimate infinite (NaN) and its interval NaN, which the row says
    # (no interval, and why: hop.online.reducer); numpy's RuntimeWarning of it ("invalid value encountered in
    # subtract", with a line of this file) was printed on the run's terminal at every snapshot.
    with np.errstate(invalid="ignore", over="ignore"):
        # No bytes seen (the chunks read were empty files) leaves nothing to scale: the estimate is the 0 seen so far.
        ratio = np.divide(s, seen_bytes, out=np.zeros_like(s), where=seen_bytes > 0)
        value = np.where(final, s, total_bytes * ratio)
        residual_squares = q - 2 * ratio * cross + ratio * ratio * byte_squares
        residual = np.where(residual_squares > 0, residual_squares, np.nan) / np.maximum(n - 1, 1)  # (no spread: NaN)
        mean_bytes = np.where(seen_bytes > 0, seen_bytes / n, 1.0)
        se = np.sqrt((1 - n / big_n) * residual / n) * (total_bytes / mean_bytes)
        skew = np.zeros_like(s)
        if thirds is not None:
            cube, square_size, size_square = np.asarray(thirds, dtype=float).reshape(-1, 3).T
            cubes, magnitude = _residual_cubes(cube, square_size, size_square, byte_cubes, ratio)
            skew = _skews(cubes, magnitude, residual_squares, n, samples)
    return value.tolist(), *_bounds(value, s, se, t, skew, final), final.tolist()


def _bounds(value: Any, exact: Any, se: Any, t: Any, skew: Any, final: Any) -> tuple[list[Any], list[Any]]:
    """The intervals' lower and upper bounds per group (numpy arrays in, lists out, ``None`` for none): ``exact``
    where ``final``, else ``value`` less and plus the arms (:func:`_arms_of` of ``t`` and ``skew``) in standard
    errors ``se``."""
    import numpy as np

    down, up = _arms_of(t, skew)
    with np.errstate(invalid="ignore", over="ignore"):
        low = np.where(final, exact, value - down * se)
        high = np.where(final, exact, value + up * se)
    return _nones(low), _nones(high)


def estimate_means(
    moments: Sequence[tuple[float, float, float, float, float]],
    seen: Sequence[int],
    chunks: Sequence[int],
    confidence: float,
    occurrences: Sequence[int] | None = None,
    thirds: Sequence[tuple[float, float, float, float]] | None = None,
) -> tuple[list[float], list[float | None], list[float | None], list[bool]]:
    """:func:`estimate_mean` for many groups at once; ``moments`` are ``(sum x, sum y, sum x², sum xy, sum y²)``,
    ``occurrences`` and ``thirds`` as ``occurred`` and ``thirds`` there."""
    import numpy as np

    m = np.asarray(moments, dtype=float).reshape(-1, 5)
    sx, sy, qxx, qxy, qyy = m.T
    n = np.asarray(seen, dtype=float)
    big_n = np.asarray(chunks, dtype=float)
    final = n >= big_n
    samples = _samples_of(n, occurrences)
    t = _quantiles(samples, confidence)
    with np.errstate(invalid="ignore", over="ignore"):  # (see estimate_totals)
        ratio = sy / sx
        residual_squares = qyy - 2 * ratio * qxy + ratio * ratio * qxx
        residual = np.where(residual_squares > 0, residual_squares, np.nan)  # (no spread: NaN, no interval)
        se = np.sqrt((1 - n / big_n) * residual * samples / (np.maximum(samples - 1, 1) * sx * sx))
        skew = np.zeros_like(sx)
        if thirds is not None:
            xxx, xxy, xyy, yyy = np.asarray(thirds, dtype=float).reshape(-1, 4).T
            cubes, magnitude = _residual_cubes(yyy, xyy, xxy, xxx, ratio)
            skew = _skews(cubes, magnitude, residual_squares, samples, samples)
    return ratio.tolist(), *_bounds(ratio, ratio, se, t, skew, final), final.tolist()


def _nones(values: Any) -> list[float | None]:
    """NaN (no interval yet) as ``None``."""
    return [None if value != value else value for value in values.tolist()]
