"""The order trials' checker (tests/reliability/order_model.py) on recorded end states, without a server: it passes
the right ones and fails every wrong one -- recorded from trials with the protocol broken on purpose, recorded
from a real failure of the first long run, and derived from a right one by one change each.

tests/reliability/data/order_end_states.json holds end states as the harness recorded them (moto,
``Harness.run(plan, keep_state=True)``): ``oncall`` (seed 1: Y SIGKILLed before its first delete batch, `recover`
finished it), ``recoveries`` (seed 1: K SIGKILLed after its journal, two of three recoveries finished it, one
said another process had), ``overwrite-append-no_replace`` (seed 1, the overwrite's delete step removed:
both tables visible), ``overwrite-compact-no_conflict`` (seed 1, the compaction's conflict check removed: the
replaced rows came back) and ``oncall-run1-seed10`` (the first long run, before the cleanup fix: Z reported
CommitStateUnknownError and `recover` committed it afterwards).
"""

from __future__ import annotations

import copy
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.reliability import order_model
from tests.reliability.order_model import JobPlan, apply, check, flatten, serial_tables

DATA = Path(__file__).parent / "data" / "order_end_states.json"
RECORDED = json.loads(DATA.read_text())


def recorded(name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    case = copy.deepcopy(RECORDED[name])
    return case["state"], case["jobs"]


# ---------------------------------------------------------------- recorded end states
@pytest.mark.parametrize("name", ["oncall", "recoveries"])
def test_recorded_right_end_states_pass(name: str) -> None:
    state, jobs = recorded(name)
    verdict = check(state, jobs)
    assert verdict.ok, verdict.violations
    assert verdict.notes["visible rows"] == verdict.notes["model rows"] > 0


@pytest.mark.parametrize("name, expected", [
    ("overwrite-append-no_replace", ["the visible rows are not the order's model", "no serial order"]),
    ("overwrite-compact-no_conflict", ["the visible rows are not the order's model", "no serial order"]),
    # Recorded before the checker judged jobs that lose their job (f9521f3): a job whose place ended committed
    # counts among the successes whatever it reported, so only its CommitStateUnknownError -- in a trial where
    # nothing pauses and no store fails, which must not happen -- is left of the four violations recorded.
    ("oncall-run1-seed10", ["failed with CommitStateUnknownError, not a named conflict"]),
])
def test_recorded_wrong_end_states_fail(name: str, expected: list[str]) -> None:
    state, jobs = recorded(name)
    verdict = check(state, jobs)
    for text in expected:
        assert any(text in v for v in verdict.violations), (text, verdict.violations)
    assert set(verdict.violations) <= set(RECORDED[name]["recorded"]["violations"])  # within the trial's verdict


def test_the_resurrected_rows_are_named() -> None:
    """The issue's first scenario, compaction beside overwrite: the replaced partition's old rows are back."""
    state, jobs = recorded("overwrite-compact-no_conflict")
    [problem] = [v for v in check(state, jobs).violations if "order's model" in v]
    assert "rows too many" in problem and "rows missing" not in problem and "'s0 " in problem


# ---------------------------------------------------------------- one change each to a right end state
def _drop_row(state: dict, jobs: dict) -> None:
    state["rows"].pop(0)


def _twice(state: dict, jobs: dict) -> None:
    state["rows"].append(list(state["rows"][0]))


def _moved(state: dict, jobs: dict) -> None:
    directory, line = state["rows"][0]
    state["rows"][0] = ["dt=9", line]


def _unknown_row(state: dict, jobs: dict) -> None:
    state["rows"].append(["dt=0", "nobody dt=0 t0 r0"])


def _resurrected(state: dict, jobs: dict) -> None:
    """A row of a seed the static overwrite replaced, back."""
    state["rows"].append(["dt=0", "s0 dt=0 t0 r0"])


def _success_rolled_back(state: dict, jobs: dict) -> None:
    z = jobs["z"]["job_id"]
    next(e for e in state["order"] if e["jobId"] == z)["outcome"] = "rolled_back"


def _open_place(state: dict, jobs: dict) -> None:
    state["order"][-1]["outcome"] = None


def _failure_committed(state: dict, jobs: dict) -> None:
    jobs["x"]["report"] = {"ok": False, "error": "JobRolledBackError", "message": "rolled back"}


def _crash(state: dict, jobs: dict) -> None:
    jobs["x"]["report"] = {"ok": False, "error": "RetriesExhaustedError", "message": "still failed"}


def _pending(state: dict, jobs: dict) -> None:
    state["pending"].append("t/dt=0/part-00000-x.c000.txt")


def _records(state: dict, jobs: dict) -> None:
    state["records"].append("t/_temporary/mpcommit/x/job.json")


def _stale_success(state: dict, jobs: dict) -> None:
    state["success"] = {"jobId": jobs["s0"]["job_id"], "position": 1}


def _recover_failed(state: dict, jobs: dict) -> None:
    jobs["r"]["recover_actions"].append({"job_id": jobs["y"]["job_id"], "action": "failed", "detail": "boom"})


def _two_finishers(state: dict, jobs: dict) -> None:
    jobs["r"]["recover_actions"].append({"job_id": jobs["z"]["job_id"], "action": "finished", "detail": "",
                                         "position": 5, "finished_elsewhere": False})


def _hung(state: dict, jobs: dict) -> None:
    jobs["z"]["hung"] = True


def _wrong_position(state: dict, jobs: dict) -> None:
    jobs["z"]["report"]["position"] = 4


def _mode_differs(state: dict, jobs: dict) -> None:
    jobs["x"]["mode"] = "append"


MUTATIONS = {
    "a row lost": (_drop_row, "rows missing"),
    "a row twice": (_twice, "rows too many"),
    "a row in another partition": (_moved, "not the partition it was written to"),
    "a row nobody wrote": (_unknown_row, "a visible row no job wrote"),
    "a replaced row back": (_resurrected, "rows too many"),
    "a success rolled back in the order": (_success_rolled_back, "reported success, its place"),
    "a place left open": (_open_place, "still open"),
    "a failure whose place committed": (_failure_committed, "its place 4 ended committed"),
    "a crash of the protocol": (_crash, "not a named conflict or refusal"),
    "an upload left pending": (_pending, "uploads still pending"),
    "job records left": (_records, "job records left"),
    "_SUCCESS of an earlier job": (_stale_success, "_SUCCESS names"),
    "a recover that failed": (_recover_failed, "recover failed"),
    "two processes saying they finished one job": (_two_finishers, "finished by 2 processes"),
    "a process that hung": (_hung, "did not end"),
    "a reported position not the job's place": (_wrong_position, "reported position 4"),
    "an order entry of another mode": (_mode_differs, "the job was append"),
}


@pytest.mark.parametrize("what", list(MUTATIONS))
def test_every_wrong_end_state_derived_from_a_right_one_fails(what: str) -> None:
    state, jobs = recorded("oncall")
    mutate, expected = MUTATIONS[what]
    mutate(state, jobs)
    verdict = check(state, jobs)
    assert any(expected in v for v in verdict.violations), verdict.violations


def test_a_broken_model_fails_on_a_right_end_state(monkeypatch: pytest.MonkeyPatch) -> None:
    """The model is part of the checker: with a dynamic overwrite taken for a static one, the right recorded end
    state of the oncall trial (Y, X and Z are dynamic overwrites of different partitions) fails."""
    right = apply

    def static_for_dynamic(table: dict, job: JobPlan) -> dict:
        return right(table, JobPlan(job.name, job.mode, "static", job.rows))

    monkeypatch.setattr(order_model, "apply", static_for_dynamic)
    state, jobs = recorded("oncall")
    assert not check(state, jobs).ok


# ---------------------------------------------------------------- the model itself
def _plan(name: str, mode: str, po: str, partitions: dict[str, int]) -> JobPlan:
    return JobPlan.from_json({"name": name, "mode": mode, "po": po,
                              "files": [{"task": i, "partition": p, "rows": n}
                                        for i, (p, n) in enumerate(partitions.items())]})


def test_the_model_applies_each_mode() -> None:
    seed = _plan("s", "append", "static", {"dt=0": 1, "dt=1": 1})
    table = apply({}, seed)
    assert flatten(apply(table, _plan("a", "append", "static", {"dt=1": 1}))) == Counter({
        ("dt=0", "s dt=0 t0 r0"): 1, ("dt=1", "s dt=1 t1 r0"): 1, ("dt=1", "a dt=1 t0 r0"): 1})
    assert flatten(apply(table, _plan("o", "overwrite", "static", {"dt=1": 1}))) == Counter({("dt=1", "o dt=1 t0 r0"): 1})
    assert flatten(apply(table, _plan("d", "overwrite", "dynamic", {"dt=1": 1}))) == Counter({
        ("dt=0", "s dt=0 t0 r0"): 1, ("dt=1", "d dt=1 t0 r0"): 1})
    assert flatten(table) == Counter({("dt=0", "s dt=0 t0 r0"): 1, ("dt=1", "s dt=1 t1 r0"): 1})  # unchanged


def test_serial_orders_of_two_overwrites_and_an_append() -> None:
    o1 = _plan("o1", "overwrite", "static", {"dt=0": 1})
    o2 = _plan("o2", "overwrite", "static", {"dt=1": 1})
    a = _plan("a", "append", "static", {"dt=0": 1})
    tables = serial_tables([], [o1, o2, a])
    # The last overwrite is o1 or o2, and the append came after it or not: four tables.
    assert tables is not None and len(tables) == 4
    both = Counter({("dt=0", "o1 dt=0 t0 r0"): 1, ("dt=1", "o2 dt=1 t0 r0"): 1})
    assert both not in tables  # both overwrites' tables at once: no serial order leaves that


def test_the_exact_order_is_stronger_than_some_serial_order() -> None:
    """Two static overwrites at places 3 and 4; the table shows the rows of the one at place 3. Some serial order
    of the two leaves that table, so the weaker check passes; the order says place 4 took effect last, so the
    exact check fails."""
    state, jobs = recorded("overwrite-append-no_replace")
    seeds = {n: j for n, j in jobs.items() if j["role"] == "seed"}
    o1 = {"role": "write", "name": "o1", "mode": "overwrite", "po": "static", "job_id": "o1-id", "killed": False,
          "files": [{"task": 0, "partition": "dt=0", "rows": 1}], "report": {"ok": True, "position": 3}}
    o2 = {**o1, "name": "o2", "job_id": "o2-id", "report": {"ok": True, "position": 4}}
    jobs = {**seeds, "o1": o1, "o2": o2}
    entry = {"purpose": "write", "mode": "overwrite", "partitionOverwrite": "static", "outcome": "committed"}
    state["order"] = [e for e in state["order"] if e["position"] <= 2] + [
        {**entry, "position": 3, "jobId": "o1-id"}, {**entry, "position": 4, "jobId": "o2-id"}]
    state["rows"] = [["dt=0", "o1 dt=0 t0 r0"]]
    state["files"] = []
    state["success"] = {"jobId": "o2-id", "position": 4}
    violations = check(state, jobs).violations
    assert [v for v in violations if v.startswith("the visible rows are not the order's model")]
    assert not [v for v in violations if v.startswith("no serial order")]
    state["rows"] = [["dt=0", "o2 dt=0 t0 r0"]]
    assert check(state, jobs).ok
