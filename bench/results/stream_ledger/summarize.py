"""The figures of README.md from the raw records: python bench/results/stream_ledger/summarize.py [DIR]
(DIR: this folder, whose old-N.jsonl / new-N.jsonl are the first run; or shared-order/ or listing-reused/, whose
old-N/ and new-N/ folders hold a record each)."""
import collections
import glob
import json
import statistics as st
import sys

base = sys.argv[1] if len(sys.argv) > 1 else "bench/results/stream_ledger"
rows = collections.defaultdict(list)   # (side, files) -> seconds
per_round = collections.defaultdict(list)
for path in sorted(glob.glob(f"{base}/*-*.jsonl") + glob.glob(f"{base}/*-*/*.jsonl")):
    name = path.rsplit("/", 1)[1][:-6] if path.count("/") == base.count("/") + 1 else path.rsplit("/", 2)[1]
    side, rnd = name.split("-")
    for line in open(path):
        r = json.loads(line)
        if r.get("kind") != "run":
            continue
        rows[(side, r["files"])].append(r["seconds"])
        per_round[(side, rnd, r["files"])].append(r["seconds"])
for files in (10, 100):
    o, n = rows[("old", files)], rows[("new", files)]
    print(f"files {files}: old p50 {st.median(o)*1000:.0f} ms (n={len(o)}), new p50 {st.median(n)*1000:.0f} ms "
          f"(n={len(n)}), ratio {st.median(n)/st.median(o):.2f}")
    rounds = sorted({k[1] for k in per_round if k[2] == files})
    ratios = [st.median(per_round[("new", r, files)]) / st.median(per_round[("old", r, files)]) for r in rounds
              if per_round.get(("new", r, files)) and per_round.get(("old", r, files))]
    print("   per-round p50 ratios", [round(x, 2) for x in ratios])
