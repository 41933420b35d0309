"""The order trials' results per server and pairing, from the raw records (one JSON line per trial,
tests/reliability/results/order-trials-SERVER.jsonl, or a kept run's runN-*.jsonl):

    python -m tests.reliability.order_trials_report tests/reliability/results/order-trials-*.jsonl

Per server and pairing: trials, seeds, passed and failed, the trials whose commits overlapped in time, what the
processes ended as, the wall time and the load. Exit status 1 when a trial failed.
"""

from __future__ import annotations

import json
import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

PAIRING_ORDER = ("overwrite-overwrite", "overwrite-append", "overwrite-compact", "oncall", "recoveries", "mixed",
                 "pause-driver", "pause-recover", "brownout", "no-conditions", "depths")
#: The pairings where a process loses its job (issue 36): their own table says what the paused or cut-off
#: process met and how it ended.
ZOMBIE_PAIRINGS = ("pause-driver", "pause-recover", "brownout")


def load(paths: list[Path]) -> list[dict[str, Any]]:
    records = []
    for path in paths:
        for line in path.read_text().splitlines():
            if line.strip():
                records.append(json.loads(line))
    return records


def _outcomes(group: list[dict[str, Any]]) -> str:
    c: Counter[str] = Counter()
    for r in group:
        for p in r["procs"].values():
            role = p["role"] if p["role"] != "write" else (p.get("mode") or "write")
            outcome = p["outcome"]
            if role == "recover":
                # What the recoveries did, by action, rather than "ok" (they always report).
                for a in p.get("actions", []):
                    action = a.split(":", 1)[1]
                    if action.startswith("finished") or action.startswith("rolled_back"):
                        c[f"recover {action}"] += 1
                if outcome != "ok":
                    c[f"recover {outcome}"] += 1
                continue
            if outcome.startswith("ok:"):
                outcome = outcome[3:]
            c[f"{role} {outcome}"] += 1
    return ", ".join(f"{k} {n}" for k, n in sorted(c.items()))


def table(records: list[dict[str, Any]]) -> str:
    groups: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        if r.get("mutant"):
            continue
        groups[(r["server"], r["pairing"])].append(r)
    lines = ["| Server | Pairing | Trials | Seeds | Passed | Failed | Commits overlapped | Processes ended | "
             "Wall per trial (median) | Load (1 min) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    order = {p: i for i, p in enumerate(PAIRING_ORDER)}
    for (server, pairing), group in sorted(groups.items(), key=lambda kv: (kv[0][0] != "moto", kv[0][0],
                                                                          order.get(kv[0][1], 99), kv[0][1])):
        seeds = sorted(r["seed"] for r in group)
        walls = sorted(r.get("trial_seconds", 0.0) for r in group)
        loads = [r["load1"] for r in group if "load1" in r]
        failed = sum(1 for r in group if not r["ok"])
        lines.append(
            f"| {server} | {pairing} | {len(group)} | {seeds[0]}-{seeds[-1]} | {len(group) - failed} | "
            f"{'**' + str(failed) + '**' if failed else 0} | {sum(1 for r in group if r.get('commits_overlapped'))} | "
            f"{_outcomes(group)} | {walls[len(walls) // 2]:.1f} s | "
            f"{min(loads):.1f}-{max(loads):.1f} |")
    return "\n".join(lines)


def _zombie(r: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """The trial's paused or cut-off process (``v`` or ``r1``)."""
    for name in ("v", "r1"):
        p = r["procs"].get(name)
        if p is not None and (p.get("stop") or p.get("brownout")):
            return name, p
    return None


def zombies(records: list[dict[str, Any]]) -> str:
    """Per server and pairing of issue 36: trials where the process really paused, where the order was collected
    past it, and how the paused (or cut-off) process ended."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        if not r.get("mutant") and r["pairing"] in ZOMBIE_PAIRINGS:
            groups[(r["server"], r["pairing"])].append(r)
    if not groups:
        return ""
    lines = ["| Server | Pairing | Trials | Paused (reached its stop) | Paused longer than the lease | "
             "Order collected through place 4 or beyond | How it ended | Stray ends noted |",
             "|---|---|---|---|---|---|---|---|"]
    order = {p: i for i, p in enumerate(PAIRING_ORDER)}
    for (server, pairing), group in sorted(groups.items(), key=lambda kv: (kv[0][0] != "moto", kv[0][0],
                                                                          order.get(kv[0][1], 99))):
        paused = long = collected = strays = 0
        ended: Counter[str] = Counter()
        for r in group:
            found = _zombie(r)
            if found is None:
                continue
            name, p = found
            spans = [s for s in p.get("paused") or () if s and s[0] is not None]
            paused += bool(spans) or bool(p.get("brownout"))
            long += any(s[1] is not None and s[1] - s[0] > 3.0 for s in spans)
            # The paused job's place is 3 or 4 (after the two seeds, beside the append S).
            collected += (r.get("order_seen") or {}).get("collected_through", 0) >= 4
            strays += bool((r.get("notes") or {}).get("stray ends"))
            outcome = p["outcome"]
            if p["role"] == "recover":  # what it said of the job it was finishing
                said = [a.split(":", 1)[1] for a in p.get("actions", []) if a.startswith("k:")]
                outcome = f"k {said[0]}" if said else f"{outcome}, nothing for k"
            ended[outcome] += 1
        lines.append(f"| {server} | {pairing} | {len(group)} | {paused} | {long} | {collected} | "
                     f"{', '.join(f'{k} {n}' for k, n in sorted(ended.items()))} | {strays} |")
    return "\n".join(lines)


def kinds(records: list[dict[str, Any]]) -> str:
    """The failed trials' violations, by kind (their first words), per server."""
    c: Counter[tuple[str, str]] = Counter()
    for r in records:
        if r["ok"] or r.get("mutant"):
            continue
        for v in r["violations"]:
            kind = v.split(":")[0] if v.startswith(("order:", "a visible row")) else " ".join(v.split()[1:5])
            c[(r["server"], kind)] += 1
    return "\n".join(f"- {server}: {kind} ... x{n}" for (server, kind), n in sorted(c.items()))


def failures(records: list[dict[str, Any]]) -> str:
    out = []
    for r in records:
        if r["ok"] or r.get("mutant"):
            continue
        out.append(f"- {r['server']} {r['pairing']} seed {r['seed']}: " + "; ".join(r["violations"][:3]))
    return "\n".join(out)


def main(argv: list[str]) -> int:
    records = load([Path(p) for p in argv[1:]])
    print(table(records))
    lost = zombies(records)
    if lost:
        print("\nThe processes that paused or were cut off (issue 36):\n\n" + lost)
    failed = failures(records)
    if failed:
        print("\nFailed trials:\n" + failed)
        print("\nViolations by kind:\n" + kinds(records))
    runs = sorted({(r.get("run") or {}).get("commit", "") for r in records} - {""})
    if runs:
        print(f"\nat commit {', '.join(runs)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
