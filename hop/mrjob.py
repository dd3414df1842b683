"""``python -m hop.mrjob JOB.py INPUT... -o OUT [hop options] [-- job options]``: run an unmodified mrjob job on hop.

The same as ``hop run --mrjob``; see ``hop.mrjob_adapter`` for what is supported.
"""

from __future__ import annotations

import sys

from hop.cli import main as hop_main

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    return hop_main(["run", "--mrjob", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
