"""What an mrjob job's jobconf means on hop (``hop run --mrjob``, see ``hop.mrjob_adapter``).

mrjob combines a step's jobconf as its runners do: the job's ``jobconf()`` (``JOBCONF`` by default), then the
``--jobconf`` options given after ``--``, then the step's ``MRStep(jobconf=...)``, later ones winning
(``mrjob.conf.combine_jobconfs``). Of these settings hop follows the number of reducers,
``mapreduce.job.reduces`` or its old name ``mapred.reduce.tasks`` (``hop run --reducers`` wins over both, for every
step), and the task timeout, ``mapreduce.task.timeout`` or ``mapred.task.timeout`` (milliseconds, 0 for none:
``hop run --task-timeout``, which wins); it names the others it ignores in one warning. All of them are in the
step's tasks' environment, where ``mrjob.compat.jobconf_from_env`` finds them, as mrjob's local runners put them
(:attr:`StepJobconf.environment`).
"""

from __future__ import annotations

from typing import Any

from hop.loader import JobFileError

__all__ = ["StepJobconf", "step_jobconfs"]

REDUCES = "mapreduce.job.reduces"
TASK_TIMEOUT = "mapreduce.task.timeout"


class StepJobconf:
    """One step's combined jobconf: :attr:`reducers`, the number it asks for (``None``: hop's default),
    :attr:`task_timeout`, in seconds (``None``: none), :attr:`ignored`, the settings hop does not follow, and
    :attr:`environment`, all of them as the step's tasks' environment variables (``name.with.dots`` as
    ``name_with_dots``, as mrjob's local runners set them)."""

    def __init__(
        self,
        reducers: int | None,
        ignored: dict[str, str],
        settings: dict[str, str] | None = None,
        task_timeout: float | None = None,
    ) -> None:
        self.reducers = reducers
        self.task_timeout = task_timeout
        self.ignored = ignored
        self.environment = {name.replace(".", "_"): str(value) for name, value in (settings or {}).items()}


def step_jobconfs(mr: Any, path: str) -> list[StepJobconf]:
    """The jobconf of each of the job ``mr``'s steps. The two names of the number of reducers are one setting: the
    later source's wins, whichever name it uses (a ``None`` value clears it, as mrjob clears a setting). Raises
    :class:`JobFileError` (naming the file, the step and the setting) for a number of reducers that is not a whole
    number, for both names set to different numbers in one source, and for 0 on a step with a reducer: Hadoop runs
    such a step map-only, without its reducer, where mrjob's local runners and hop run it."""
    from mrjob.compat import translate_jobconf_for_all_versions
    from mrjob.conf import combine_jobconfs

    names = translate_jobconf_for_all_versions(REDUCES)  # (mapred.reduce.tasks, mapreduce.job.reduces)
    timeout_names = translate_jobconf_for_all_versions(TASK_TIMEOUT)  # (mapred.task.timeout, mapreduce.task...)
    job_name = type(mr).__name__
    confs = []
    for number, mr_step in enumerate(mr.steps()):
        description = mr_step.description(number)
        layers = [mr.jobconf(), getattr(mr.options, "jobconf", None), description.get("jobconf")]
        where = f"{path}: {job_name} step {number + 1}"  # (from 1, as hop run numbers steps)
        setting = _latest_setting(layers, names, where, "numbers of reducers")
        reducers = None if setting is None else _count(setting, where)
        if reducers == 0:
            if "reducer" in description:
                raise JobFileError(
                    f"{where}: {setting} runs the step map-only on Hadoop, without its reducer, where mrjob's "
                    "local runners and hop run the reducer: drop the setting (or the step's reducer)"
                )
            reducers = None  # a mapper-only step: its output is the mappers' output either way
        settings = combine_jobconfs(*layers)
        timeout = _task_timeout(layers, timeout_names, where)
        followed = {*names, *timeout_names}
        ignored = {name: value for name, value in settings.items() if name not in followed}
        confs.append(StepJobconf(reducers, ignored, settings, timeout))
    return confs


def _latest_setting(layers: list[Any], names: list[str], where: str, what: str) -> str | None:
    """``"name=value"`` of one setting known by several ``names`` (a Hadoop name and its old one), as the latest of
    the jobconf ``layers`` that gives it has it, whichever name it uses (``None`` where none does, or the latest
    clears it with ``None``, as mrjob clears a setting). Raises :class:`JobFileError` naming the step (``where``)
    for two names set to different values in one layer (``what``: "task timeouts")."""
    from mrjob.conf import combine_jobconfs

    setting: str | None = None
    for layer in layers:
        given = {name: layer[name] for name in names if name in (layer or {})}
        values = combine_jobconfs(given)  # (as mrjob passes them to Hadoop: 3 is "3", None is dropped)
        if len(set(values.values())) > 1:
            both = " and ".join(f"{name}={value}" for name, value in values.items())
            raise JobFileError(f"{where} sets {both}: two {what}; give one")
        if given:
            setting = next((f"{name}={value}" for name, value in values.items()), None)
    return setting


def _task_timeout(layers: list[Any], names: list[str], where: str) -> float | None:
    """The step's task timeout in seconds from the latest source that sets either of its ``names`` (milliseconds;
    0 or less: none, as on Hadoop), else None. Raises :class:`JobFileError` for a value that is not a number of
    milliseconds, or two different ones in one source."""
    setting = _latest_setting(layers, names, where, "task timeouts")
    if setting is None:
        return None
    try:
        milliseconds = int(setting.partition("=")[2])
    except ValueError:
        raise JobFileError(f"{where}: {setting}: the task timeout must be a whole number of milliseconds") from None
    return milliseconds / 1000 if milliseconds > 0 else None


def _count(setting: str, where: str) -> int:
    try:
        count = int(setting.partition("=")[2])
    except ValueError:
        count = -1
    if count < 0:
        raise JobFileError(f"{where}: {setting}: the number of reducers must be a whole number, 0 or more")
    return count
