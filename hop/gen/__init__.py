"""Seeded, fast generators of test data for hop jobs.

- :func:`generate_text` / :func:`generate_text_files`: lines of pseudo-words, Zipf or uniform, UTF-8 with a
  few percent non-ASCII words (word count, grep, sort inputs).
- :func:`generate_pageviews`: hourly ``pagecounts-YYYYMMDD-HH0000.gz`` files in the format of Wikipedia's
  published page-view dumps, with a realistic language mix, Zipf page popularity and per-language daily cycles
  (top-k, windowed and online aggregation inputs).
- :func:`parse_size`: ``"150MB"`` -> ``150_000_000`` (decimal units), as the ``hop gen`` command accepts.

Everything is deterministic in its seed: the same arguments give byte-identical files.
"""

from __future__ import annotations

from typing import Any

from hop.gen.cli import parse_size

# The generators need numpy; import them on first use so that `hop run` does not pay for it at start-up.
_LAZY = {
    "generate_pageviews": "hop.gen.pageviews",
    "generate_text": "hop.gen.text",
    "generate_text_files": "hop.gen.text",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'hop.gen' has no attribute {name!r}")


__all__ = ["generate_pageviews", "generate_text", "generate_text_files", "parse_size"]
