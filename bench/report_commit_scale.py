"""Markdown tables for BENCHMARKS.md's "Commit at scale" section from bench/results/commit_scale*.json.

    python -m bench.report_commit_scale commit_scale_before commit_scale_10k commit_scale_100k commit_scale_procs
"""

from __future__ import annotations

import json
import sys

from .common import RESULTS_DIR, describe_ratio, md_table


def cpu_section(name: str) -> str:
    data = json.loads((RESULTS_DIR / f"{name}.json").read_text())
    out = [f"**{name}** -- `{data.get('command', '')}`; {data['machine']['date']}; {data['machine']['load']}", ""]
    for files, size in data["sizes"].items():
        rows = []
        for variant, m in size["medians"].items():
            n = len(size["runs"][variant])
            rows.append([variant, n, f"{m['cpu_ms_per_file']:.3f}", f"{m['wall_s']:.2f}", f"{m['files_per_s']:,.0f}",
                         f"{m['load']:.1f}"])
        out.append(f"{int(files):,} files:")
        out.append("")
        out.append(md_table(["variant", "runs", "client CPU ms/file (median)", "wall s (median)", "files/s (median)",
                             "load (median)"], rows))
        out.append("")
        for label, r in size.get("ratios", {}).items():
            out.append(f"- {label}: {describe_ratio(r)}")
        out.append("")
    return "\n".join(out)


def main(argv: list[str]) -> None:
    for name in argv:
        print(cpu_section(name))


if __name__ == "__main__":
    main(sys.argv[1:])
