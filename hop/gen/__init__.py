"""Seeded, fast generators of test data for hop jobs.

- :func:`generate_text` / :func:`generate_text_files`: lines of pseudo-words, Zipf or uniform, UTF-8 with a
  few percent non-ASCII words (word count, grep, sort inputs).
- :func:`generate_pageviews`: hourly ``pagecounts-YYYYMMDD-HH0000.gz`` files in the format of Wikipedia's
  published page-view dumps, with a realistic language mix, Zipf page popularity and per-language daily cycles
  (top-k, windowed and online aggregation inputs).
- :func:`parse_size`: ``"150MB"`` -> ``150_000_000`` (decimal units), as the ``hop gen`` command accepts.

Everything is deterministic in its seed: the same arguments give byte-identical files.
"""

from hop.gen.cli import parse_size
from hop.gen.pageviews import generate_pageviews
from hop.gen.text import generate_text, generate_text_files

__all__ = ["generate_pageviews", "generate_text", "generate_text_files", "parse_size"]
