"""The benchmarks' raw records: one JSON line per run, kept in git under ``bench/results/<scenario>.jsonl`` so that
every figure of BENCHMARKS.md can be recomputed (``python -m bench.report_tables``).

A file holds two kinds of line, both compact (floats to 5 significant digits, empty values left out):

* ``{"kind": "session", "session": ID, ...}``: once per invocation of a benchmark -- when, at which commit of the
  code (and whether the work tree had changes under ``mpcommit/``), on which machine, with which command, load
  average and network profile;
* ``{"kind": "run", "session": ID, "variant": ..., "pair": N, ...}``: one run. ``pair`` numbers the rounds of an
  interleaved schedule: runs of one session with the same ``pair`` ran back to back, so their ratio is a paired
  one.

Smoke runs (short, small, on a busy machine: a check of the harness, not figures) are written elsewhere
(``--records bench/results/smoke``) and rendered apart.
"""

from __future__ import annotations

import functools
import json
import math
import os
import platform
import subprocess
import time
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
RESULTS_DIR = REPO_ROOT / "bench" / "results"
SMOKE_DIR = RESULTS_DIR / "smoke"


def compact(value: Any, digits: int = 5) -> Any:
    """``value`` with floats rounded to ``digits`` significant digits and None, NaN and empty containers left out
    of mappings: what a record keeps."""
    if isinstance(value, bool) or value is None or isinstance(value, (int, str)):
        return value
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return None
        return float(f"{value:.{digits}g}")
    if isinstance(value, Mapping):
        out = {}
        for k, v in value.items():
            c = compact(v, digits)
            if c is None or (isinstance(c, (dict, list)) and not c):
                continue
            out[str(k)] = c
        return out
    if isinstance(value, (list, tuple)):
        return [compact(v, digits) for v in value]
    return str(value)


def _git(root: Path, *args: str) -> str:
    try:
        return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def code_version(commit: str, root: Path = REPO_ROOT) -> str:
    """The last commit at or before ``commit`` that changed the product code (``mpcommit/``), or "" when git does
    not know ``commit``. Runs at commits that differ only in tests, benchmarks or documents measured the same code:
    the tables name the code by this commit, so that a full run spread over several sessions (each adding its
    records in a commit of its own) is still "at one named commit"."""
    full = _git(root, "rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}")  # HEAD moves: never cached
    return _code_version_of(full, root) if full else ""


@functools.lru_cache(maxsize=None)
def _code_version_of(full_commit: str, root: Path) -> str:
    return _git(root, "log", "-1", "--format=%h", "--abbrev=10", full_commit, "--", "mpcommit")


def git_state(root: Path = REPO_ROOT) -> dict[str, Any]:
    """The commit the code ran at, the version of the product code (:func:`code_version`), and whether the
    product code (``mpcommit/``) had uncommitted changes."""
    return {"commit": _git(root, "rev-parse", "--short=10", "HEAD") or "?",
            "code": code_version("HEAD", root) or "?",
            "dirty": bool(_git(root, "status", "--porcelain", "--", "mpcommit")),
            "branch": _git(root, "rev-parse", "--abbrev-ref", "HEAD")}


def machine() -> dict[str, Any]:
    cpu = platform.processor() or "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory = None
    try:
        kb = int(next(x for x in Path("/proc/meminfo").read_text().splitlines() if x.startswith("MemTotal")).split()[1])
        memory = round(kb / 1024 / 1024, 1)
    except (OSError, StopIteration, ValueError):
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "memory_gib": memory, "os": f"{platform.system()} {platform.release()}",
            "python": platform.python_version()}


class RecordLog:
    """Appends a session line, then one line per :meth:`run`, to ``<directory>/<scenario>.jsonl``."""

    def __init__(self, scenario: str, *, directory: Path | str | None = None, command: str | None = None,
                 **meta: Any):
        self.scenario = scenario
        self.directory = Path(directory) if directory else RESULTS_DIR
        self.path = self.directory / f"{scenario}.jsonl"
        self.session = time.strftime("%Y%m%dT%H%M%S") + "-" + uuid.uuid4().hex[:6]
        self.meta = {"kind": "session", "session": self.session, "scenario": scenario,
                     "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "git": git_state(),
                     "machine": machine(), "load": [round(x, 2) for x in os.getloadavg()],
                     "command": command or "python -m " + " ".join(_argv()), **meta}
        self._opened = False

    def _write(self, line: Mapping[str, Any]) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a") as f:
            f.write(json.dumps(compact(line), separators=(",", ":"), sort_keys=False) + "\n")

    def run(self, **fields: Any) -> dict[str, Any]:
        """Record one run (the session line goes first, once)."""
        if not self._opened:
            self._write(self.meta)
            self._opened = True
        line = {"kind": "run", "session": self.session, "scenario": self.scenario, **fields}
        self._write(line)
        return line


def _argv() -> list[str]:
    import sys

    argv = list(sys.argv)
    if argv and argv[0].endswith(".py"):
        mod = Path(argv[0]).resolve()
        try:
            argv[0] = ".".join(mod.relative_to(REPO_ROOT).with_suffix("").parts)
        except ValueError:
            pass
    return argv


def load(paths: Iterable[Path | str]) -> tuple[dict[str, dict[str, Any]], list[dict[str, Any]]]:
    """Sessions (by id) and runs, from JSONL files; runs of unknown sessions are kept (their session is {})."""
    sessions: dict[str, dict[str, Any]] = {}
    runs: list[dict[str, Any]] = []
    for path in paths:
        p = Path(path)
        if not p.exists():
            continue
        for n, line in enumerate(p.read_text().splitlines(), 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{p}:{n}: not a JSON line ({exc})") from exc
            if rec.get("kind") == "session":
                sessions[rec["session"]] = rec
            elif rec.get("kind") == "run":
                runs.append(rec)
    return sessions, runs


def load_dir(directory: Path | str, scenario: str) -> tuple[dict[str, dict[str, Any]], list[dict[str, Any]]]:
    return load([Path(directory) / f"{scenario}.jsonl"])
