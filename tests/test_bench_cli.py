"""``python -m bench``'s options and its contenders' requirements: refused or reported before anything runs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from bench import contenders
from bench.cli import main


@pytest.mark.parametrize(
    ("options", "said"),
    [
        (["--contenders", ","], "argument --contenders: no name in ','"),
        (["--workloads", ""], "argument --workloads: no name in ''"),
        (["--contenders", "serial,hop-pipelined,serial"], "argument --contenders: serial given more than once"),
        (["--size", "0"], "argument --size: invalid size '0': must be above zero"),
        (["--mrjob-slice", "0"], "argument --mrjob-slice: invalid size '0': must be above zero"),
    ],
)
def test_options_that_would_run_nothing_or_fail_later_are_refused_before_any_input_is_made(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], options: list[str], said: str
) -> None:
    """An empty ``--contenders`` or ``--workloads`` generated every workload's 150 MB inputs, ran nothing and exited
    0; ``--size 0`` ended in a traceback of the failed ``hop gen`` (a name twice ran it twice under one row)."""
    with pytest.raises(SystemExit) as ended:
        main([*options, "--data-dir", str(tmp_path / "data"), "--json", str(tmp_path / "out.json")])
    assert ended.value.code == 2
    assert said in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


@pytest.fixture
def fresh_checks() -> Iterator[None]:
    contenders._check.cache_clear()
    yield
    contenders._check.cache_clear()


def test_a_java_home_without_java_makes_the_spark_contenders_unavailable_saying_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_checks: None
) -> None:
    """Spark runs ``$JAVA_HOME/bin/java`` whatever the PATH holds: with a JAVA_HOME holding none, the bench found
    ``java`` on the PATH, called PySpark available, and its runs failed with "Java gateway process exited before
    sending its port number"."""
    monkeypatch.setenv("JAVA_HOME", str(tmp_path))
    reason = contenders._check("java")  # (what pyspark-rdd's and spark-sql's unavailable() say, PySpark being here)
    assert reason is not None and f"JAVA_HOME is {tmp_path}, which holds no bin/java" in reason, reason
