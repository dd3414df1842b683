"""Seeded synthetic Wikipedia page-view logs in the format of the published hourly ``pagecounts`` dumps.

Contract of :func:`generate_pageviews`:

- One file per hour, ``pagecounts-YYYYMMDD-HH0000.gz`` (gzip; no ``.gz`` and plain text when
  ``compress=False``), for ``days`` days from ``start`` (UTC). File ``HH`` holds the views of the hour
  starting at ``HH:00``.
- Each line is ``lang page_title views bytes``: four fields separated by one space, ``views >= 1`` and
  ``bytes >= 1`` integers, ``bytes`` about ``views`` times a per-page response size. Lines are sorted by
  ``(lang, title)`` as in the real dumps. Titles are ASCII: words joined by ``_``, non-ASCII characters
  percent-encoded as UTF-8 (``Caf%C3%A9``), never whitespace.
- Language mix: ``en`` about 43% of views, then de, ja, es, fr, ru, it, pl, pt, zh, nl, sv, a tail of smaller
  2-3 letter codes and about 2% of sister projects (``en.d``, ``en.b``, ``de.d``, ``commons.m``...).
- Within a language page popularity is Zipf (rank ``r`` gets weight ``1/r``); rank 1 is the main page.
- The "core" pages, the top ``min(2000, lines per hour / 4)`` pages by expected views across languages,
  appear in every hour's file; the other pages appear when they draw at least one view (Poisson), so tail
  pages come and go.
- Traffic of each language follows a daily cycle peaking in the evening of its main time zone (ja at UTC
  13, zh 14, ru 18, de/fr/en 19, es 22, pt 0...), scaled per day by a weekday factor (quieter Saturdays)
  and seeded noise; each day a few pages spike (news), and every page's popularity drifts from day to day
  (the core pages by about 10%, as main pages and other perennials are steady; the tail by about 35%).
- View counts are at the scale of the real dumps (``views_per_hour``, default 5,000,000 at average traffic)
  however few lines a file has: which pages an hour lists is drawn at the file's scale, and each listed page's
  count is a Poisson draw whose mean is its share, among the pages listed, of its language's real-scale
  views that hour. A (language, hour) total is then a Poisson draw around its expected value however many
  tail pages happened to be listed, so totals vary from day to day with traffic (calendar, drift of the
  popular pages) rather than with the sampling noise of a small file; a small file's tail pages stand for
  many real ones and carry more views each than real tail pages do.
- The page universe, the pages the files draw from, holds exactly ``pages`` distinct ``(lang, title)`` pages,
  shared among the languages by their share of views (largest remainders; a language whose share rounds to no
  page is left out), so no more than ``pages`` distinct pages appear in all the files together; the summary's
  ``pages`` is how many do. ``pages=None`` is :data:`DEFAULT_PAGES`, or more when ``size_bytes`` asks for more
  lines an hour than about a third of that (:data:`_MAX_PRESENT_SHARE`: tail pages stay sparse, coming and going
  from hour to hour); given ``pages`` too few for ``size_bytes`` so are refused (ValueError naming how many it
  needs), not grown past the bound given.
- ``size_bytes`` sets the total uncompressed size of all files (hit within a few percent by calibrating the
  hourly number of views on a sample of hours); without it each hour has about ``min(20_000, pages // 5)``
  lines (at least 1).
- The same arguments give identical content (and byte-identical gzip files: the gzip header time is 0).

Each hour costs a few vector operations over the page universe plus rendering of the present lines, all numpy.
"""

from __future__ import annotations

import datetime as dt
import gzip
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import numpy as np

from hop.gen.text import accent_words, latin_words, script_words
from hop.gen.whole import all_or_nothing, refuse_leftovers

DEFAULT_LINES_PER_HOUR = 20_000
DEFAULT_PAGES = 200_000
"""The page universe's size without ``pages`` (grown when ``size_bytes`` asks for more lines an hour)."""
MAX_CORE_PAGES = 2_000
GZIP_LEVEL = 3  # the dumps are read far more often than written; level 3 is ~2x faster than 6 for ~10% more bytes

# Independent random streams of one seed: changing the number of days never changes the universe or the
# earlier days.
_UNIVERSE, _CALENDAR, _PAGE_DAY, _HOUR = 0x0501, 0x0502, 0x0503, 0x0504

_PAGE_ZIPF = 1.0
_SIZE_MEDIAN, _SIZE_SIGMA = 14_000.0, 0.9  # bytes per view: log-normal, as article sizes are
_DRIFT_SIGMA = 0.35  # day-to-day log-normal drift of a tail page's popularity
_CORE_DRIFT_SIGMA = 0.10  # ...and of a core page's: popular pages are steady from day to day
DEFAULT_VIEWS_PER_HOUR = 5_000_000
_WEEKDAY = (1.02, 1.03, 1.02, 1.0, 0.96, 0.88, 0.97)  # Monday..Sunday: Wikipedia is quietest on Saturday
_MAX_PRESENT_SHARE = 0.35  # lines per hour as a share of the universe above which the universe grows


@dataclass(frozen=True)
class _Lang:
    code: str
    weight: float  # share of views, in percent before normalisation
    tz: float  # UTC offset of the main audience
    peak: float  # local hour of peak traffic
    amplitude: float  # of the daily cycle: traffic swings between 1-a and 1+a times the daily mean
    script: str


# Weights follow the 2009 dumps roughly. en mixes American, European and Asian readers, so its cycle is
# flatter and peaks in the American day/European evening.
_LANGUAGES: tuple[_Lang, ...] = (
    _Lang("en", 42.0, -5, 14, 0.30, "latin"),
    _Lang("de", 8.0, 1, 20, 0.50, "latin"),
    _Lang("ja", 7.0, 9, 22, 0.55, "ja"),
    _Lang("es", 5.0, -5, 17, 0.50, "latin"),
    _Lang("fr", 4.5, 1, 20, 0.50, "latin"),
    _Lang("ru", 3.5, 3, 21, 0.50, "cyrillic"),
    _Lang("it", 3.0, 1, 21, 0.50, "latin"),
    _Lang("pl", 2.5, 1, 20, 0.50, "latin"),
    _Lang("pt", 2.5, -3, 21, 0.50, "latin"),
    _Lang("zh", 2.0, 8, 22, 0.50, "zh"),
    _Lang("nl", 1.5, 1, 20, 0.50, "latin"),
    _Lang("sv", 1.0, 1, 20, 0.50, "latin"),
    _Lang("ar", 0.9, 3, 22, 0.45, "arabic"),
    _Lang("ko", 0.9, 9, 22, 0.50, "ko"),
    _Lang("tr", 0.8, 2, 21, 0.50, "latin"),
    _Lang("fi", 0.7, 2, 20, 0.50, "latin"),
    _Lang("cs", 0.7, 1, 20, 0.50, "latin"),
    _Lang("id", 0.6, 7, 20, 0.45, "latin"),
    _Lang("he", 0.6, 2, 21, 0.45, "hebrew"),
    _Lang("fa", 0.6, 3.5, 21, 0.45, "arabic"),
    _Lang("hu", 0.5, 1, 20, 0.50, "latin"),
    _Lang("no", 0.5, 1, 20, 0.50, "latin"),
    _Lang("uk", 0.5, 2, 21, 0.50, "cyrillic"),
    _Lang("da", 0.4, 1, 20, 0.50, "latin"),
    _Lang("ro", 0.4, 2, 21, 0.50, "latin"),
    _Lang("vi", 0.4, 7, 21, 0.45, "latin"),
    _Lang("th", 0.35, 7, 21, 0.45, "thai"),
    _Lang("el", 0.3, 2, 21, 0.50, "greek"),
    _Lang("ca", 0.3, 1, 20, 0.50, "latin"),
    _Lang("bg", 0.25, 2, 21, 0.50, "cyrillic"),
    _Lang("sr", 0.25, 1, 21, 0.50, "cyrillic"),
    _Lang("sk", 0.2, 1, 20, 0.50, "latin"),
    _Lang("hi", 0.2, 5.5, 21, 0.45, "devanagari"),
    _Lang("lt", 0.15, 2, 20, 0.50, "latin"),
    _Lang("hr", 0.15, 1, 20, 0.50, "latin"),
    _Lang("sl", 0.12, 1, 20, 0.50, "latin"),
    _Lang("et", 0.1, 2, 20, 0.50, "latin"),
    _Lang("ms", 0.1, 8, 21, 0.45, "latin"),
    _Lang("eo", 0.05, 1, 20, 0.40, "latin"),
    _Lang("simple", 0.2, -5, 14, 0.35, "latin"),
    _Lang("als", 0.02, 1, 20, 0.50, "latin"),
    _Lang("nds", 0.02, 1, 20, 0.50, "latin"),
    _Lang("war", 0.02, 8, 21, 0.45, "latin"),
    _Lang("ceb", 0.02, 8, 21, 0.45, "latin"),
    # Sister projects, named as in the dumps: .b books, .d dictionary, .q quote, .s source, .n news, .m media.
    _Lang("en.d", 0.5, -5, 14, 0.30, "dict"),
    _Lang("en.b", 0.25, -5, 14, 0.35, "latin"),
    _Lang("en.q", 0.15, -5, 14, 0.30, "latin"),
    _Lang("en.s", 0.15, -5, 14, 0.30, "latin"),
    _Lang("en.n", 0.05, -5, 14, 0.30, "latin"),
    _Lang("de.d", 0.12, 1, 20, 0.50, "dict"),
    _Lang("fr.d", 0.15, 1, 20, 0.50, "dict"),
    _Lang("de.b", 0.08, 1, 20, 0.50, "latin"),
    _Lang("commons.m", 0.3, 0, 17, 0.35, "media"),
)

_MAIN_PAGES = {
    "en": "Main_Page", "de": "Wikipedia:Hauptseite", "ja": "メインページ", "es": "Wikipedia:Portada",
    "fr": "Wikipédia:Accueil_principal", "ru": "Заглавная_страница", "it": "Pagina_principale",
    "pl": "Wikipedia:Strona_główna", "pt": "Wikipédia:Página_principal", "zh": "Wikipedia:首页",
    "nl": "Hoofdpagina", "sv": "Portal:Huvudsida",
}  # fmt: skip
_NAMESPACES = ("Category:", "File:", "Talk:", "User:", "Template:", "Wikipedia:", "Portal:", "Help:")
_QUALIFIERS = ("film", "album", "band", "song", "novel", "disambiguation", "footballer", "river", "ship")
_SAFE = "!$&'()*+,-./:;=@_~"  # ASCII punctuation left as is by quote(); only non-ASCII gets percent-encoded


@dataclass(frozen=True)
class _Universe:
    """All pages that can appear, sorted by ``(lang, title)`` (the order of lines in a file)."""

    lang: np.ndarray  # int64 index into _LANGUAGES
    weight: np.ndarray  # float64 share of all views at average traffic; sums to 1
    size: np.ndarray  # float64 bytes per view
    core: np.ndarray  # bool: present in every hour
    prefix: np.ndarray  # uint8 buffer of b"lang title " pieces
    prefix_start: np.ndarray  # int64
    prefix_len: np.ndarray  # int64

    def __len__(self) -> int:
        return int(self.lang.size)


def _capitalize(word: str) -> str:
    return word[:1].upper() + word[1:]


def _latin_title(words: list[str], u: list[float]) -> str:
    """A Wikipedia-looking title from 1-3 pseudo-words and four uniform draws ``u``.

    Later words are capitalised half the time (names); some titles get a namespace, a year, a number or a
    disambiguation qualifier, as real titles do.
    """
    title = "_".join([_capitalize(words[0])] + [_capitalize(w) if u[0] < 0.5 else w for w in words[1:]])
    kind, pick = u[1], u[2]
    if kind < 0.06:
        ns = _NAMESPACES[int(pick * len(_NAMESPACES))]
        return ns + title + (".jpg" if ns == "File:" else "")
    if kind < 0.10:
        return f"{title}_({_QUALIFIERS[int(pick * len(_QUALIFIERS))]})"
    if kind < 0.115:
        return f"{1800 + int(pick * 210)}_{title}"
    if kind < 0.13:
        return f"{title}_{1 + int(pick * 99)}"
    return title


def _titles(rng: np.random.Generator, lang: _Lang, n: int) -> list[str]:
    """``n`` distinct raw (not yet percent-encoded) titles of a language, most popular first."""
    fixed = [] if "." in lang.code else [_MAIN_PAGES.get(lang.code, "Main_Page"), "Special:Search", "Special:Random"]
    titles: dict[str, None] = dict.fromkeys(fixed[:n])
    # English titles are rarely accented; other Latin-script languages often are (Café, Müller, Łódź).
    accent_share = 0.01 if lang.code.startswith(("en", "simple")) else 0.08
    while len(titles) < n:
        batch = (n - len(titles)) * 5 // 4 + 16
        if lang.script in ("latin", "dict", "media"):
            words = latin_words(rng, batch * 3, max_syllables=3 if lang.script == "media" else 4)
            accented = np.flatnonzero(rng.random(batch * 3) < accent_share).tolist()
            for i, word in zip(accented, accent_words(rng, [words[i] for i in accented]), strict=True):
                words[i] = word
            draws = rng.random((batch, 4)).tolist()
            if lang.script == "dict":  # wiktionary entries are single lower-case words
                new = words[:batch]
            elif lang.script == "media":
                new = [
                    f"File:{_capitalize(words[2 * i])}_{words[2 * i + 1]}.{'jpg' if u[0] < 0.7 else 'png'}"
                    for i, u in enumerate(draws)
                ]
            else:
                new = [_latin_title(words[3 * i : 3 * i + 1 + int(u[3] * u[3] * 3)], u) for i, u in enumerate(draws)]
        else:
            # Scripts without spaces (ja, zh) glue syllables; others use 1-2 words. Some titles are Latin.
            spaced = lang.script not in ("ja", "zh")
            first = script_words(rng, batch, lang.script, 1 if spaced else 2, 3 if spaced else 5)
            second = script_words(rng, batch, lang.script, 1, 3)
            latin = latin_words(rng, batch, max_syllables=3)
            new = []
            for a, b, c, r in zip(first, second, latin, rng.random(batch).tolist(), strict=True):
                if r < 0.08:
                    new.append(_capitalize(c))
                elif spaced and r < 0.5:
                    new.append(f"{a}_{b}")
                else:
                    new.append(a)
        titles.update(dict.fromkeys(new))
    return list(titles)[:n]


def _pages_per_language(shares: np.ndarray, pages: int) -> list[int]:
    """``pages`` shared among languages of view ``shares`` (summing to 1), exactly: each gets its quota's whole
    part, the pages left go to the largest remainders. (Each got at least 3 before, whatever ``pages``: 53
    languages made ``pages=50`` a universe of 178.)"""
    quota = shares * pages
    counts = np.floor(quota).astype(np.int64)
    rest = pages - int(counts.sum())
    counts[np.argsort(-(quota - counts), kind="stable")[:rest]] += 1
    return [int(n) for n in counts]


def _build_universe(seed: int, pages: int, core: int) -> _Universe:
    rng = np.random.default_rng([seed, _UNIVERSE])
    shares = np.array([lang.weight for lang in _LANGUAGES])
    shares /= shares.sum()
    lang_idx: list[np.ndarray] = []
    weights: list[np.ndarray] = []
    keys: list[tuple[str, str]] = []
    counts = _pages_per_language(shares, pages)
    for i, (lang, share, n) in enumerate(zip(_LANGUAGES, shares.tolist(), counts, strict=True)):
        if n == 0:
            continue
        zipf = np.arange(1, n + 1, dtype=np.float64) ** -_PAGE_ZIPF
        weights.append(share * zipf / zipf.sum())
        lang_idx.append(np.full(n, i, dtype=np.int64))
        keys.extend((lang.code, t if t.isascii() else quote(t, safe=_SAFE)) for t in _titles(rng, lang, n))
    weight = np.concatenate(weights)
    size = np.exp(rng.normal(math.log(_SIZE_MEDIAN), _SIZE_SIGMA, weight.size))
    is_core = np.zeros(weight.size, dtype=bool)
    is_core[np.argsort(-weight, kind="stable")[:core]] = True
    order = sorted(range(len(keys)), key=keys.__getitem__)
    encoded = [f"{keys[i][0]} {keys[i][1]} ".encode("ascii") for i in order]
    prefix_len = np.fromiter((len(e) for e in encoded), dtype=np.int64, count=len(encoded))
    prefix_start = np.zeros_like(prefix_len)
    np.cumsum(prefix_len[:-1], out=prefix_start[1:])
    perm = np.array(order, dtype=np.int64)
    return _Universe(
        lang=np.concatenate(lang_idx)[perm],
        weight=weight[perm],
        size=size[perm],
        core=is_core[perm],
        prefix=np.frombuffer(b"".join(encoded), dtype=np.uint8),
        prefix_start=prefix_start,
        prefix_len=prefix_len,
    )


def _calendar(seed: int, start: dt.date, days: int) -> np.ndarray:
    """Traffic factor ``[day, hour, lang]``, mean about 1: daily cycle x weekday x day and hour noise."""
    rng = np.random.default_rng([seed, _CALENDAR])
    tz = np.array([lang.tz for lang in _LANGUAGES])
    peak = np.array([lang.peak for lang in _LANGUAGES])
    amplitude = np.array([lang.amplitude for lang in _LANGUAGES])
    hours = np.arange(24, dtype=np.float64)[:, None]
    cycle = 1 + amplitude * np.cos(2 * np.pi * (hours + tz - peak) / 24)  # [hour, lang]
    weekday = np.array([_WEEKDAY[(start + dt.timedelta(days=d)).weekday()] for d in range(days)])
    day_noise = np.exp(rng.normal(0.0, 0.05, (days, 1, len(_LANGUAGES))))
    hour_noise = np.exp(rng.normal(0.0, 0.03, (days, 24, len(_LANGUAGES))))
    return cycle[None, :, :] * weekday[:, None, None] * day_noise * hour_noise


def _page_day(seed: int, day: int, universe: _Universe) -> np.ndarray:
    """Per-page popularity factor of one day: log-normal drift (mean 1) plus a few news spikes.

    Spikes hit non-core pages only and lift a page to at most 0.5% of all traffic, so that one story can top
    the charts of a day without dwarfing a whole language.
    """
    rng = np.random.default_rng([seed, _PAGE_DAY, day])
    sigma = np.where(universe.core, _CORE_DRIFT_SIGMA, _DRIFT_SIGMA)
    factor = np.exp(rng.normal(-(sigma**2) / 2, sigma))
    tail = np.flatnonzero(~universe.core)
    if tail.size:
        spikes = tail[rng.integers(0, tail.size, 3 + tail.size // 20_000)]
        boost = np.exp(rng.normal(3.0, 1.0, spikes.size))
        factor[spikes] *= np.minimum(boost, 0.005 / universe.weight[spikes])
    return factor


_POW10 = 10 ** np.arange(19, dtype=np.int64)


def _ndigits(x: np.ndarray) -> np.ndarray:
    return np.searchsorted(_POW10, x, side="right")


def _put_ints(out: np.ndarray, at: np.ndarray, x: np.ndarray, nd: np.ndarray) -> None:
    """Write the decimal digits of ``x`` (``nd`` digits each) into ``out`` starting at offsets ``at``."""
    col = np.arange(int(nd.max()))
    power = nd[:, None] - 1 - col
    valid = power >= 0
    digits = x[:, None] // _POW10[np.maximum(power, 0)] % 10
    out[(at[:, None] + col)[valid]] = digits[valid] + 48


def _render(universe: _Universe, idx: np.ndarray, views: np.ndarray, nbytes: np.ndarray) -> np.ndarray:
    """The lines ``prefix views bytes\\n`` of pages ``idx`` as one uint8 array."""
    if idx.size == 0:
        return np.zeros(0, dtype=np.uint8)
    plen = universe.prefix_len[idx]
    nd_views, nd_bytes = _ndigits(views), _ndigits(nbytes)
    length = plen + nd_views + nd_bytes + 2
    ends = np.cumsum(length)
    starts = ends - length
    out = np.empty(int(ends[-1]), dtype=np.uint8)
    # Copy the prefixes with one gather: byte j of a prefix goes from prefix_start + j to line start + j.
    local = np.arange(int(plen.sum()), dtype=np.int64) - np.repeat(np.cumsum(plen) - plen, plen)
    out[np.repeat(starts, plen) + local] = universe.prefix[np.repeat(universe.prefix_start[idx], plen) + local]
    at_views = starts + plen
    _put_ints(out, at_views, views, nd_views)
    out[at_views + nd_views] = 32
    _put_ints(out, at_views + nd_views + 1, nbytes, nd_bytes)
    out[ends - 1] = 10
    return out


def _listed_share(universe: _Universe, rate: np.ndarray, listed: np.ndarray) -> np.ndarray:
    """Per language, its pages' total rate over the rate of its pages weighted by ``listed`` (1 for a listed
    page, or the probability of being listed): what a listed page's count is scaled by so that the counts
    of the pages listed add up, in expectation, to the whole language's views."""
    languages = len(_LANGUAGES)
    everything = np.bincount(universe.lang, weights=rate, minlength=languages)
    seen = np.bincount(universe.lang, weights=rate * listed, minlength=languages)
    return everything / np.maximum(seen, 1e-300)


def _hour(
    universe: _Universe, rate: np.ndarray, scale: float, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray, int]:
    """The uint8 content, listed pages (indices into the universe, one per line) and views of one hour file,
    given each page's expected views ``rate`` at the file's scale (which pages are listed) and ``scale``, the
    real-scale views per unit of ``rate``."""
    present = (rng.random(rate.size) < -np.expm1(-rate)) | universe.core
    idx = np.flatnonzero(present)
    factor = scale * _listed_share(universe, rate, present.astype(np.float64))
    views = np.maximum(rng.poisson(rate[idx] * factor[universe.lang[idx]]), 1)
    nbytes = np.maximum(np.rint(views * universe.size[idx] * rng.uniform(0.85, 1.15, idx.size)), 1).astype(np.int64)
    return _render(universe, idx, views, nbytes), idx, int(views.sum())


def _view_scale(views_per_hour: float | None, total: float) -> float:
    """Real-scale views per view of the listing scale ``total`` (at least 1: counts never drop below it)."""
    return max(1.0, views_per_hour / total) if views_per_hour else 1.0


def _expected(
    total: float, bases: list[np.ndarray], universe: _Universe, views_per_hour: float | None
) -> tuple[float, float]:
    """Expected (lines, bytes) summed over the hours whose page rates per unit of traffic are ``bases``."""
    lines = size = 0.0
    fixed = universe.prefix_len + 2.0
    log_size = np.log10(universe.size)
    scale = _view_scale(views_per_hour, total)
    for base in bases:
        rate = np.maximum(total * base, 1e-12)
        present = np.where(universe.core, 1.0, -np.expm1(-rate))
        # About the mean count of a listed page (exact enough for the number of digits it takes).
        views = np.maximum(rate * scale * _listed_share(universe, rate, present)[universe.lang], 1.0)
        digits = np.floor(np.log10(views)) + np.floor(np.log10(views) + log_size) + 2
        lines += float(present.sum())
        size += float(present @ (fixed + digits))
    return lines, size


def _calibrate(
    target: float, by_bytes: bool, bases: list[np.ndarray], universe: _Universe, views_per_hour: float | None
) -> float:
    """The listing scale: views per hour (at traffic factor 1) at which pages are listed, making the expected
    lines or bytes of ``bases`` hit ``target``."""

    def miss(log_total: float) -> float:
        got = _expected(math.exp(log_total), bases, universe, views_per_hour)[1 if by_bytes else 0]
        return math.log(max(got, 1e-9) / target)

    # Bracket in log space, then regula falsi (Illinois): the function is smooth and nearly linear in log-log.
    lo = hi = math.log(max(target / len(bases) / (40.0 if by_bytes else 1.0), 1.0))
    f_lo = f_hi = miss(lo)
    for _ in range(60):
        if f_lo <= 0:
            break
        lo -= 2.0
        f_lo = miss(lo)
    else:
        return math.exp(lo)  # even no traffic beyond the core pages is too much: the core floor wins
    for _ in range(60):
        if f_hi >= 0:
            break
        hi += 2.0
        f_hi = miss(hi)
    side = 0
    for _ in range(60):
        if abs(f_hi - f_lo) < 1e-12 or hi - lo < 1e-9:
            break
        mid = (lo * f_hi - hi * f_lo) / (f_hi - f_lo)
        f_mid = miss(mid)
        if abs(f_mid) < 5e-4:
            return math.exp(mid)
        if f_mid > 0:
            hi, f_hi = mid, f_mid
            if side == 1:
                f_lo /= 2
            side = 1
        else:
            lo, f_lo = mid, f_mid
            if side == -1:
                f_hi /= 2
            side = -1
    return math.exp((lo + hi) / 2)


def _file_name(day: dt.date, hour: int, compress: bool) -> str:
    return f"pagecounts-{day:%Y%m%d}-{hour:02d}0000" + (".gz" if compress else "")


def generate_pageviews(
    directory: str | os.PathLike[str],
    *,
    days: int = 1,
    start: str = "2009-01-01",
    size_bytes: int | None = None,
    pages: int | None = None,
    seed: int = 0,
    compress: bool = True,
    views_per_hour: float | None = DEFAULT_VIEWS_PER_HOUR,
) -> dict[str, Any]:
    """Write ``days * 24`` hourly pagecounts files into ``directory`` (contract: see the module doc).

    Returns ``{"directory", "paths", "files", "lines", "bytes", "compressed_bytes", "views", "pages", "universe",
    "core_pages"}``: ``bytes`` is the uncompressed total, ``compressed_bytes`` the size on disk, ``pages`` the
    distinct pages the files list, ``universe`` the size of the page universe they were drawn from (``pages`` as
    given, or the default's as grown). ``views_per_hour=None`` keeps counts at the listing's own scale
    (a listed page's count is then about its expected views at the file's scale, at least 1).
    """
    if days < 1:
        raise ValueError(f"days must be >= 1, got {days}")
    if pages is not None and pages < 1:
        raise ValueError(f"pages must be >= 1, got {pages}")
    if size_bytes is not None and size_bytes <= 0:
        raise ValueError(f"size_bytes must be positive, got {size_bytes}")
    if views_per_hour is not None and views_per_hour <= 0:
        raise ValueError(f"views_per_hour must be positive, got {views_per_hour}")
    try:
        first = dt.date.fromisoformat(start)
    except ValueError as error:
        raise ValueError(f"start must be a date YYYY-MM-DD, got {start!r}") from error
    names = [_file_name(first + dt.timedelta(days=day), hour, compress) for day in range(days) for hour in range(24)]
    refuse_leftovers(Path(directory), "pagecounts-*", names)
    hours = days * 24
    # Lines per hour wanted; 45 bytes is a typical line, the exact size is calibrated below.
    universe_size = DEFAULT_PAGES if pages is None else pages
    if size_bytes is None:
        per_hour = max(min(DEFAULT_LINES_PER_HOUR, universe_size // 5), 1.0)
    else:
        per_hour = max(size_bytes / hours / 45.0, 1.0)
        needed = math.ceil(per_hour / _MAX_PRESENT_SHARE)
        if pages is None:
            universe_size = max(universe_size, needed)
        elif pages < needed:
            raise ValueError(_too_few_pages(size_bytes, per_hour, pages, needed))
    universe = _build_universe(seed, universe_size, min(MAX_CORE_PAGES, max(1, int(per_hour // 4))))
    calendar = _calendar(seed, first, days)

    # Calibrate on up to 24 hours, one per hour of day, spread over the days (weekdays and cycles both count).
    samples = max(6, min(24, 5_000_000 // len(universe)))
    drift: dict[int, np.ndarray] = {}
    bases = []
    for k in range(samples):
        day, hour = k * days // samples, k * 24 // samples
        if day not in drift:
            drift[day] = _page_day(seed, day, universe)
        bases.append(universe.weight * calendar[day, hour][universe.lang] * drift[day])
    target = float(size_bytes) if size_bytes is not None else per_hour * samples
    scale = samples / hours if size_bytes is not None else 1.0
    total = _calibrate(target * scale, size_bytes is not None, bases, universe, views_per_hour)
    view_scale = _view_scale(views_per_hour, total)
    del bases, drift

    root = Path(directory)
    summary: dict[str, Any] = {
        "directory": str(root),
        "paths": [],
        "files": hours,
        "lines": 0,
        "bytes": 0,
        "compressed_bytes": 0,
        "views": 0,
        "pages": 0,
        "universe": len(universe),
        "core_pages": int(universe.core.sum()),
    }
    listed = np.zeros(len(universe), dtype=bool)
    with all_or_nothing() as made:  # (interrupted: none of its files, nor the folder it made, is left behind)
        made.directory(root)
        for day in range(days):
            date = first + dt.timedelta(days=day)
            base = universe.weight * _page_day(seed, day, universe) * total
            for hour in range(24):
                rng = np.random.default_rng([seed, _HOUR, day, hour])
                content, present, views = _hour(universe, base * calendar[day, hour][universe.lang], view_scale, rng)
                listed[present] = True
                path = root / _file_name(date, hour, compress)
                with made.file(path) as raw:
                    if compress:
                        with gzip.GzipFile(path.name, "wb", GZIP_LEVEL, raw, mtime=0) as out:
                            out.write(content.data)
                    else:
                        raw.write(content.data)
                summary["paths"].append(str(path))
                summary["lines"] += int(present.size)
                summary["views"] += views
                summary["bytes"] += content.size
                summary["compressed_bytes"] += path.stat().st_size
    summary["pages"] = int(listed.sum())
    return summary


def _too_few_pages(size_bytes: int, per_hour: float, pages: int, needed: int) -> str:
    """Why ``pages`` cannot give ``size_bytes`` (about ``per_hour`` lines an hour), and what to give instead."""
    most = int(pages * _MAX_PRESENT_SHARE)
    return (
        f"--size {size_bytes:,} bytes takes about {per_hour:,.0f} lines an hour, more than --pages {pages:,} list "
        f"(about {most:,} an hour: a third or so of the pages, so that tail pages come and go from hour to hour); "
        f"give --pages {needed:,} or more, or a smaller --size"
    )
