import json, glob, statistics as st, collections
rows = collections.defaultdict(list)   # (side, files) -> seconds
per_round = collections.defaultdict(dict)
for path in sorted(glob.glob('bench/results/stream_ledger/*-*.jsonl')):
    side, rnd = path.rsplit('/', 1)[1][:-6].split('-')
    for l in open(path):
        r = json.loads(l)
        if r.get('kind') != 'run': continue
        rows[(side, r['files'])].append(r['seconds'])
        per_round[(side, rnd, r['files'])].setdefault('s', []).append(r['seconds'])
for files in (10, 100):
    o, n = rows[('old', files)], rows[('new', files)]
    print(f"files {files}: old p50 {st.median(o)*1000:.0f} ms (n={len(o)}), new p50 {st.median(n)*1000:.0f} ms (n={len(n)}), ratio {st.median(n)/st.median(o):.2f}")
    rs = []
    for rnd in '123':
        a, b = per_round.get(('old', rnd, files)), per_round.get(('new', rnd, files))
        if a and b: rs.append(st.median(b['s'])/st.median(a['s']))
    if rs: print('   per-round p50 ratios', [round(x,2) for x in rs])
