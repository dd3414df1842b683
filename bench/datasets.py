"""Benchmark inputs: generated once with ``hop gen`` and cached in the data directory.

A cached input's name spells every parameter that shaped it (``text-zipf-150000000B-v100000-s1.txt``,
``pageviews-150000000B-d2-s1/``), so changing ``--size`` or the generator options makes a new file rather than
reusing a wrong one. Generation writes to a ``.tmp-`` name and renames when done, so an interrupted run leaves
nothing that looks finished. Slices (the first N bytes, cut at a line end; for a directory, the same share of
every file, names kept) serve the contenders too slow for the full input.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from bench.environment import hop_command, subprocess_env

SEED = 1
VOCABULARY = 100_000
PAGEVIEW_DAYS = 2


@dataclass(frozen=True)
class Dataset:
    """A generated input: one file or a directory of files."""

    path: Path
    description: str

    @property
    def files(self) -> list[Path]:
        if self.path.is_dir():
            return sorted(p for p in self.path.iterdir() if p.is_file() and p.name[0] not in "_.")
        return [self.path]

    @property
    def bytes(self) -> int:
        return sum(p.stat().st_size for p in self.files)

    @property
    def inputs(self) -> list[str]:
        """What to pass to a contender on its command line."""
        return [str(self.path)]


def _generate(final: Path, command: list[str]) -> None:
    """Run a ``hop gen`` command that writes ``.tmp-NAME`` and rename it to ``final``."""
    temporary = final.with_name(".tmp-" + final.name)
    if temporary.is_dir():
        shutil.rmtree(temporary)
    temporary.unlink(missing_ok=True)
    final.parent.mkdir(parents=True, exist_ok=True)
    print(f"bench: generating {final.name} ...", file=sys.stderr, flush=True)
    subprocess.run([*hop_command(), "gen", *command, str(temporary)], check=True, env=subprocess_env())
    temporary.rename(final)


def text(data_dir: Path, size: int, uniform: bool = False) -> Dataset:
    """Zipf (or uniform) pseudo-word text of ``size`` bytes from ``hop gen text --seed 1``."""
    kind = "uniform" if uniform else "zipf"
    path = data_dir / f"text-{kind}-{size}B-v{VOCABULARY}-s{SEED}.txt"
    if not path.is_file():
        options = ["--size", str(size), "--seed", str(SEED), "--vocabulary", str(VOCABULARY)]
        _generate(path, ["text", *options, *(["--uniform"] if uniform else [])])
    return Dataset(path, f"{size / 1e6:g} MB {kind} text")


def pageviews(data_dir: Path, size: int) -> Dataset:
    """Hourly page-count files of about ``size`` bytes in all (plain text, so every engine splits them)."""
    path = data_dir / f"pageviews-{size}B-d{PAGEVIEW_DAYS}-s{SEED}"
    if not path.is_dir():
        options = ["--size", str(size), "--days", str(PAGEVIEW_DAYS), "--seed", str(SEED), "--no-gzip"]
        _generate(path, ["pageviews", *options])
    return Dataset(path, f"{size / 1e6:g} MB pageviews ({PAGEVIEW_DAYS * 24} files)")


def _head(source: Path, target: Path, limit: int) -> None:
    """Copy the first ``limit`` bytes of ``source``, cut back to the last complete line."""
    with open(source, "rb") as handle:
        data = handle.read(limit)
    if len(data) == limit and not data.endswith(b"\n"):
        data = data[: data.rfind(b"\n") + 1]
    target.write_bytes(data)


def slice_of(dataset: Dataset, limit: int) -> Dataset:
    """The first ``limit`` bytes of a dataset (the dataset itself when it is no larger)."""
    total = dataset.bytes
    if total <= limit:
        return dataset
    final = dataset.path.with_name(f"{dataset.path.name}.slice-{limit}B")
    if not final.exists():
        temporary = final.with_name(".tmp-" + final.name)
        shutil.rmtree(temporary, ignore_errors=True)
        if dataset.path.is_dir():
            temporary.mkdir(parents=True)
            for path in dataset.files:
                _head(path, temporary / path.name, path.stat().st_size * limit // total)
        else:
            _head(dataset.path, temporary, limit)
        temporary.rename(final)
    return Dataset(final, f"first {limit / 1e6:g} MB of {dataset.description}")
