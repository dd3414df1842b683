"""Wording shared by the command line's messages."""

from __future__ import annotations

__all__ = ["counted"]


def counted(count: int, noun: str) -> str:
    """``count`` and ``noun`` in the singular or the plural (an ``s`` added): ``1 row``, ``0 rows``, ``1,000 rows``."""
    return f"{count:,} {noun}{'' if count == 1 else 's'}"
