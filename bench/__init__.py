"""Side-by-side benchmarks of mpcommit and the alternatives it replaces (issue 6).

Run everything with ``make bench`` (``python -m bench.run_all``); see ``bench/run_all.py`` for options.
Every figure is measured in one run against one server, with the variants interleaved, and reported as a
median over repeats and as a ratio to its baseline.
"""
