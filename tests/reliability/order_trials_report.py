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

PAIRING_ORDER = ("overwrite-overwrite", "overwrite-append", "overwrite-compact", "oncall", "recoveries", "mixed")


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
    failed = failures(records)
    if failed:
        print("\nFailed trials:\n" + failed)
    runs = sorted({(r.get("run") or {}).get("commit", "") for r in records} - {""})
    if runs:
        print(f"\nat commit {', '.join(runs)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
