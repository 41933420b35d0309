"""Spark's own record of what ran: the event log (``spark.eventLog.enabled``), read from Python.

A SparkListener lives in the JVM; the event log is the same listener events as JSON lines, one file per
application (``spark.eventLog.compress=false`` and ``spark.eventLog.rolling.enabled=false`` keep it one plain
file; ``APPID.inprogress`` while the application runs). Every ``SparkListenerTaskEnd`` names the task (its
index in the stage), the attempt number, whether it was speculative, the host and executor it ran on, and how
it ended (``Success``, ``TaskKilled`` with the reason, ``ExecutorLostFailure`` ...).
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

__all__ = ["TaskEnd", "event_log", "event_log_settings", "task_ends", "write_stages"]


@dataclass(frozen=True)
class TaskEnd:
    stage: int
    task: int  # the partition index: mpcommit's task id
    attempt: int
    speculative: bool
    host: str
    executor: str
    reason: str  # "Success", "TaskKilled", "ExecutorLostFailure", "ExceptionFailure", ...
    detail: str  # the kill reason, or the loss reason / exception class

    @property
    def succeeded(self) -> bool:
        return self.reason == "Success"


def event_log_settings(directory: Path) -> dict[str, str]:
    return {
        "spark.eventLog.enabled": "true",
        "spark.eventLog.dir": directory.resolve().as_uri(),
        "spark.eventLog.compress": "false",
        "spark.eventLog.rolling.enabled": "false",
    }


def event_log(directory: Path, app_id: str) -> Path:
    for name in (app_id, f"{app_id}.inprogress"):
        if (directory / name).exists():
            return directory / name
    raise FileNotFoundError(f"no event log of {app_id} in {directory}: {sorted(p.name for p in directory.iterdir())}")


def _events(path: Path) -> list[dict]:
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            break  # an in-progress log may end in a partial line
    return out


def write_stages(path: Path, needle: str) -> set[int]:
    """Stages of the Spark jobs whose description (mpcommit labels its write jobs) contains ``needle``."""
    stages: set[int] = set()
    for e in _events(path):
        if e.get("Event") == "SparkListenerJobStart":
            description = (e.get("Properties") or {}).get("spark.job.description") or ""
            if needle in description:
                stages.update(e.get("Stage IDs", ()))
    return stages


def task_ends(path: Path, stages: set[int] | None = None) -> dict[int, list[TaskEnd]]:
    """Every task attempt's end, per task index, in the order Spark reported them."""
    out: dict[int, list[TaskEnd]] = defaultdict(list)
    for e in _events(path):
        if e.get("Event") != "SparkListenerTaskEnd" or (stages is not None and e["Stage ID"] not in stages):
            continue
        info, reason = e["Task Info"], e["Task End Reason"]
        detail = reason.get("Kill Reason") or reason.get("Loss Reason") or reason.get("Class Name") or ""
        out[info["Index"]].append(TaskEnd(
            stage=e["Stage ID"], task=info["Index"], attempt=info["Attempt"], speculative=info["Speculative"],
            host=info["Host"], executor=str(info["Executor ID"]), reason=reason["Reason"], detail=str(detail),
        ))
    return dict(out)
