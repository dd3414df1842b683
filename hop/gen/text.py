"""Seeded synthetic text: lines of pseudo-words drawn from a Zipf (or uniform) distribution.

Contract of :func:`generate_text`:

- The file holds whole lines of exactly ``words_per_line`` words separated by one ASCII space and ended by
  ``\\n``. Its size is the largest whole number of lines that does not exceed ``size_bytes``, so it is short
  of the target by less than one line (well under 1% for any size above a few kilobytes).
- Words come from a synthetic vocabulary of ``vocabulary`` distinct pronounceable pseudo-words derived from
  the seed. About 3% contain non-ASCII letters (accented Latin, Cyrillic, Greek, Japanese), so the output is
  UTF-8, not ASCII. No word contains whitespace.
- ``distribution="zipf"``: the word of rank ``r`` (1-based) is drawn with probability proportional to
  ``1 / r**zipf_exponent`` over the bounded vocabulary; short words get the low ranks, as in natural language.
  ``"uniform"``: every word is equally likely.
- The same arguments give byte-identical output on every run and platform (numpy's PCG64 streams are stable).

The hot loop never touches Python strings: each word is stored once, UTF-8 encoded with a trailing space, in
one byte buffer; a block of drawn word indices becomes a block of output bytes with a single numpy gather,
after which every ``words_per_line``-th trailing space is turned into a newline.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from hop.gen.whole import Made, all_or_nothing, refuse_leftovers

# Stream tags keep the vocabulary and the draws in independent random streams of one seed, so that changing
# the size of a file never changes its vocabulary, and the files of generate_text_files share one vocabulary.
_VOCAB_STREAM = 0x7E47
_DRAW_STREAM = 0xD4A3

# Lines drawn per block: enough for numpy to amortise call overhead, few enough (a few MB) to stay in cache.
_BLOCK_LINES = 16_384

# Latin syllable parts; repeated entries (and "" for none) weight the common choices.
# fmt: off
_ONSETS = ("", "", "b", "c", "d", "f", "g", "h", "j", "k", "l", "m", "n", "p", "qu", "r", "s", "t", "v", "w",
           "z", "bl", "br", "ch", "cl", "cr", "dr", "fl", "fr", "gl", "gr", "pl", "pr", "sh", "sl", "sp",
           "st", "th", "tr")
_NUCLEI = ("a", "e", "i", "o", "u", "a", "e", "i", "o", "ai", "ea", "ee", "ou", "oo", "ie")
_CODAS = ("", "", "", "", "", "n", "r", "s", "l", "m", "t", "nd", "st", "ng", "ck", "rt", "x")
# fmt: on


def _pool(onsets: str, nuclei: str) -> tuple[str, ...]:
    """All onset + nucleus syllables of a script (``-`` in ``onsets`` stands for no onset)."""
    return tuple(o.replace("-", "") + n for o in onsets.split() for n in nuclei.split())


# Syllable pools of other scripts; pageviews.py uses them too, to give each language its own script.
SCRIPT_SYLLABLES: dict[str, tuple[str, ...]] = {
    "accented": tuple("éèüöäñçåøáíóúãàßłżśőěščř"),
    "cyrillic": _pool("б в г д ж з к л м н п р с т ч ш -", "а е и о у ы я ю"),
    "greek": _pool("β γ δ θ κ λ μ ν π ρ σ τ φ χ -", "α ε η ι ο υ ω"),
    "ja": tuple("日本東京語山川田中大学国人時代かきくこさしすたちつとなのはまやらりんアイストラリルンー"),
    "zh": tuple("中国人大学北京上海天文化历史山水电影音乐城市河江省县王李张长新华"),
    "ko": tuple("한국서울대학교사람문화역시도산강영음악김이박정"),
    "arabic": (*"بتجدرسعفقكلمنهويا", "ال"),
    "hebrew": tuple("אבגדהוזחיכלמנסעפרשת"),
    "thai": tuple("กขคงจชดตทนบปพมยรลวสอ"),
    "devanagari": ("का", "की", "रा", "मा", "ने", "सं", "हि", "दी", "भा", "र", "त", "न", "प", "स", "ल", "ग"),
}

LATIN_SYLLABLES: tuple[str, ...] = tuple(
    dict.fromkeys(o + n + c for o in _ONSETS for n in _NUCLEI for c in _CODAS if o + n + c)
)

# Syllables per word: mostly two or three, as in English-like text.
_SYLLABLE_COUNTS = np.array([1, 2, 3, 4, 5])
_SYLLABLE_PROBS = np.array([0.22, 0.40, 0.26, 0.10, 0.02])

# Share of vocabulary words written partly or wholly in another script ("a few percent", to exercise UTF-8).
_FOREIGN_MIX = (("accented", 0.015), ("cyrillic", 0.007), ("ja", 0.004), ("greek", 0.004))


def latin_words(rng: np.random.Generator, n: int, *, max_syllables: int = 5) -> list[str]:
    """``n`` pronounceable ASCII pseudo-words (not necessarily distinct), lower case."""
    return _latin_words(rng, n, max_syllables)[0]


def _latin_words(rng: np.random.Generator, n: int, max_syllables: int = 5) -> tuple[list[str], list[int]]:
    """:func:`latin_words` plus the syllable count of each word."""
    probs = _SYLLABLE_PROBS[:max_syllables] / _SYLLABLE_PROBS[:max_syllables].sum()
    counts = rng.choice(_SYLLABLE_COUNTS[:max_syllables], size=n, p=probs)
    picks = rng.integers(0, len(LATIN_SYLLABLES), int(counts.sum()))
    return join_syllables(LATIN_SYLLABLES, picks, counts), counts.tolist()


def script_words(rng: np.random.Generator, n: int, script: str, lo: int = 2, hi: int = 4) -> list[str]:
    """``n`` pseudo-words of ``lo``..``hi`` syllables of a :data:`SCRIPT_SYLLABLES` script or ``"latin"``."""
    pool = LATIN_SYLLABLES if script == "latin" else SCRIPT_SYLLABLES[script]
    counts = rng.integers(lo, hi + 1, n)
    return join_syllables(pool, rng.integers(0, len(pool), int(counts.sum())), counts)


def join_syllables(pool: Sequence[str], picks: np.ndarray, counts: np.ndarray) -> list[str]:
    """Concatenate ``pool[picks]`` into words of ``counts`` syllables each (``sum(counts) == len(picks)``)."""
    syllables = [pool[i] for i in picks.tolist()]
    ends = np.cumsum(counts).tolist()
    starts = [0, *ends[:-1]]
    return ["".join(syllables[a:b]) for a, b in zip(starts, ends, strict=True)]


def accent_words(rng: np.random.Generator, words: list[str]) -> list[str]:
    """Replace one random character of each word by an accented Latin letter (``cafe`` -> ``café``)."""
    pool = SCRIPT_SYLLABLES["accented"]
    picks = rng.integers(0, len(pool), len(words)).tolist()
    where = rng.random(len(words)).tolist()
    out = []
    for word, pick, frac in zip(words, picks, where, strict=True):
        at = int(frac * len(word))
        out.append(word[:at] + pool[pick] + word[at + 1 :])
    return out


def build_vocabulary(seed: int, size: int) -> list[str]:
    """The ``size`` distinct words of the vocabulary of ``seed``, most frequent (rank 1) first.

    Ranks follow syllable count (ties broken at random), so frequent words are short as in real text. A
    foreign word inherits the syllable count of the Latin word it replaced, so foreign words spread evenly
    over ranks.
    """
    if size < 1:
        raise ValueError(f"vocabulary must be at least 1 word, got {size}")
    rng = np.random.default_rng([seed, _VOCAB_STREAM])
    syllables: dict[str, int] = {}  # word -> syllable count, in first-drawn order
    for _attempt in range(64):
        missing = size - len(syllables)
        if missing <= 0:
            break
        batch = missing + missing // 4 + 64  # over-draw a little: short words collide
        words, counts = _latin_words(rng, batch)
        # Turn a few words foreign, at random positions.
        kinds = rng.random(batch)
        low = 0.0
        for script, share in _FOREIGN_MIX:
            chosen = np.flatnonzero((kinds >= low) & (kinds < low + share)).tolist()
            low += share
            if not chosen:
                continue
            if script == "accented":
                replaced = accent_words(rng, [words[i] for i in chosen])
            else:
                replaced = script_words(rng, len(chosen), script, 1, 3)
            for i, word in zip(chosen, replaced, strict=True):
                words[i] = word
        for word, count in zip(words, counts, strict=True):
            syllables.setdefault(word, count)
    else:
        raise RuntimeError(f"could not build {size} distinct words")
    vocab = list(syllables)[:size]
    tiebreak = rng.random(size)
    lengths = np.fromiter((syllables[w] for w in vocab), dtype=np.int64, count=size)
    order = np.lexsort((tiebreak, lengths))
    return [vocab[i] for i in order.tolist()]


@dataclass(frozen=True)
class _WordTable:
    """Words as one byte buffer of ``word + b" "`` pieces plus per-word start and length arrays."""

    buffer: np.ndarray  # uint8
    starts: np.ndarray  # int64
    lengths: np.ndarray  # int64, including the trailing space

    @classmethod
    def of(cls, words: list[str]) -> _WordTable:
        encoded = [w.encode("utf-8") + b" " for w in words]
        lengths = np.fromiter((len(e) for e in encoded), dtype=np.int64, count=len(encoded))
        starts = np.zeros_like(lengths)
        np.cumsum(lengths[:-1], out=starts[1:])
        return cls(np.frombuffer(b"".join(encoded), dtype=np.uint8), starts, lengths)

    def render(self, indices: np.ndarray, words_per_line: int) -> np.ndarray:
        """The bytes of the lines made of ``indices`` (a whole number of lines), as a uint8 array."""
        lengths = self.lengths[indices]
        ends = np.cumsum(lengths)
        # For output byte j of word k: source = starts[k] + (j - out_start[k]); build it with one repeat.
        shift = self.starts[indices] - (ends - lengths)
        gather = np.repeat(shift, lengths)
        gather += np.arange(gather.size, dtype=np.int64)
        out = self.buffer[gather]
        out[ends[words_per_line - 1 :: words_per_line] - 1] = 0x0A  # last space of each line -> newline
        return out


Sampler = Callable[[np.random.Generator, int], np.ndarray]


def _make_sampler(vocabulary: int, distribution: str, zipf_exponent: float) -> Sampler:
    """A function drawing ``n`` word indices (0 = rank 1) for the given distribution."""
    if distribution == "uniform":
        return lambda rng, n: rng.integers(0, vocabulary, n)
    if distribution != "zipf":
        raise ValueError(f"distribution must be 'zipf' or 'uniform', got {distribution!r}")
    if not zipf_exponent >= 0:
        raise ValueError(f"zipf_exponent must be >= 0, got {zipf_exponent}")
    cdf = np.cumsum(np.arange(1, vocabulary + 1, dtype=np.float64) ** -zipf_exponent)
    cdf /= cdf[-1]
    last = vocabulary - 1
    # Inverse-CDF sampling; the clip guards against a draw landing exactly on a rounding-inflated last bin.
    return lambda rng, n: np.minimum(np.searchsorted(cdf, rng.random(n), side="right"), last)


def _write_lines(
    path: Path,
    size_bytes: int,
    table: _WordTable,
    sample: Sampler,
    rng: np.random.Generator,
    words_per_line: int,
    made: Made,
) -> dict[str, Any]:
    """Write whole lines to ``path`` (noted in ``made``) until the next line would pass ``size_bytes``; return the
    summary."""
    written = lines = 0
    block_words = _BLOCK_LINES * words_per_line
    with made.file(path) as out:
        while True:
            indices = sample(rng, block_words)
            line_bytes = table.lengths[indices].reshape(_BLOCK_LINES, words_per_line).sum(axis=1)
            fit = int(np.searchsorted(np.cumsum(line_bytes), size_bytes - written, side="right"))
            if fit == 0:
                break
            chunk = table.render(indices[: fit * words_per_line], words_per_line)
            out.write(chunk.data)
            written += chunk.size
            lines += fit
            if fit < _BLOCK_LINES:
                break
    return {"path": str(path), "bytes": written, "lines": lines, "words": lines * words_per_line}


def _check(size_bytes: int, words_per_line: int, vocabulary: int) -> None:
    if vocabulary < 1:
        raise ValueError(f"vocabulary must be at least 1 word, got {vocabulary}")
    if size_bytes < 0:
        raise ValueError(f"size must be >= 0 bytes, got {size_bytes}")
    if words_per_line < 1:
        raise ValueError(f"words_per_line must be >= 1, got {words_per_line}")


def generate_text(
    path: str | os.PathLike[str],
    size_bytes: int,
    *,
    seed: int = 0,
    vocabulary: int = 100_000,
    words_per_line: int = 10,
    distribution: str = "zipf",
    zipf_exponent: float = 1.0,
) -> dict[str, Any]:
    """Write about ``size_bytes`` of seeded pseudo-text to ``path`` (contract: see the module docstring).

    Returns ``{"path", "bytes", "lines", "words"}``. Parent directories are created.
    """
    _check(size_bytes, words_per_line, vocabulary)
    sample = _make_sampler(vocabulary, distribution, zipf_exponent)
    table = _WordTable.of(build_vocabulary(seed, vocabulary))
    target = Path(path)
    rng = np.random.default_rng([seed, _DRAW_STREAM])
    with all_or_nothing() as made:  # (interrupted: no folder it made is left behind)
        made.directory(target.parent)
        return _write_lines(target, size_bytes, table, sample, rng, words_per_line, made)


def _part_name(index: int) -> str:
    return f"part-{index:04d}.txt"


def generate_text_files(
    directory: str | os.PathLike[str],
    total_bytes: int,
    files: int,
    *,
    seed: int = 0,
    vocabulary: int = 100_000,
    words_per_line: int = 10,
    distribution: str = "zipf",
    zipf_exponent: float = 1.0,
) -> dict[str, Any]:
    """Write ``files`` files ``part-0000.txt``, ``part-0001.txt``... sharing ``total_bytes`` in ``directory``.

    All files share one vocabulary (word ranks are global, as for one corpus cut in parts) but draw from
    independent streams, so file ``i`` is identical whatever the number of files after it. Each file gets
    ``total_bytes // files`` bytes (the first ones one byte more for the remainder), under the same per-file
    rule as :func:`generate_text`. Returns ``{"paths", "files", "bytes", "lines", "words"}``.
    """
    _check(total_bytes, words_per_line, vocabulary)
    if files < 1:
        raise ValueError(f"files must be >= 1, got {files}")
    root = Path(directory)
    refuse_leftovers(root, "part-*.txt", [_part_name(i) for i in range(files)])  # (before the vocabulary is built)
    sample = _make_sampler(vocabulary, distribution, zipf_exponent)
    table = _WordTable.of(build_vocabulary(seed, vocabulary))
    per_file, extra = divmod(total_bytes, files)
    summary: dict[str, Any] = {"paths": [], "files": files, "bytes": 0, "lines": 0, "words": 0}
    with all_or_nothing() as made:  # (interrupted: none of its files, nor the folder it made, is left behind)
        made.directory(root)
        for i in range(files):
            rng = np.random.default_rng([seed, _DRAW_STREAM, i])
            size = per_file + (i < extra)
            part = _write_lines(root / _part_name(i), size, table, sample, rng, words_per_line, made)
            summary["paths"].append(part["path"])
            for key in ("bytes", "lines", "words"):
                summary[key] += part[key]
    return summary
