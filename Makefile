# The two commands a newcomer needs (README.md):  make demo   and   make test
# Everything they need is installed on first use: the project's venv (.venv) with the extras `demo` (PySpark and
# moto's S3 server) and `test` (pytest, the Spark Connect client), LocalStack's own venv (localstack/.venv,
# kept apart because LocalStack pins its own boto3), and versitygw, built from Go at a pinned version into
# ~/.cache/mpcommit/ (s3servers/install.sh; once per machine).

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
PYTEST_ARGS ?=

.PHONY: demo test test-long test-quick test-matrix test-seaweedfs install localstack-install s3a-install versitygw-install \
	seaweedfs-install stores-doc bench soak races clean

demo: $(STAMP)
	$(VENV)/bin/mpcommit demo

# Three pytest-xdist workers on two cores: much of the suite waits on servers, JVMs and leases. Two processes
# finish a subset in about 0.6x the time of one (tests/protocol, store, compaction and cli: 292 s -> 181 s); the
# whole CI tier from a fresh clone on a quiet machine took 15 min 11 s with three against 23 min 26 s with two
# (2026-11-29, README "Tests"). TEST_WORKERS=0 runs it in this process.
TEST_WORKERS ?= 3
test: $(STAMP) localstack-install s3a-install versitygw-install
	$(PY) -m pytest -n $(TEST_WORKERS) --durations=25 $(PYTEST_ARGS)

# The long tier `make test` leaves out (tests/conftest.py, MPCOMMIT_TIER): the soak, the stream trials' other seeds,
# the foreachBatch kill, listings of thousands of keys, and the scenarios of mpcommit's own logic on moto and
# versitygw (CI runs them on LocalStack) or on the servers their ci_on mark leaves out: README.md, "Tests", says what
# else and how long it took. Run it when the protocol changes and before a release.
test-long: $(STAMP) localstack-install s3a-install versitygw-install
	MPCOMMIT_TIER=long $(PY) -m pytest -n $(TEST_WORKERS) --durations=25 $(PYTEST_ARGS)

# The support matrix (README, "Supported versions"): the Spark tiers on each combination of PySpark and Python in a
# venv of its own under .venv-matrix/ (tests/versions/matrix.py), one after another, niced, on moto; each run
# recorded in tests/versions/results.jsonl and written into the README's table. MATRIX_ARGS="--only 3.10/3.5.9" runs
# one combination.
MATRIX_ARGS ?=
test-matrix: $(STAMP)
	$(PY) -m tests.versions.matrix $(MATRIX_ARGS)

# The tiers that run on the Go servers (README, "Tests"), on SeaweedFS: its first build takes ~10-25 minutes of
# CPU, so `make test` leaves it out.
test-seaweedfs: $(STAMP) seaweedfs-install
	MPCOMMIT_TEST_BACKENDS=seaweedfs $(PY) -m pytest -m seaweedfs $(PYTEST_ARGS)

# Without LocalStack: the moto backend only, for a fast loop while editing.
test-quick: $(STAMP)
	MPCOMMIT_TEST_BACKENDS=moto $(PY) -m pytest -m "not spark" $(PYTEST_ARGS)

install: $(STAMP)

# PySpark finds data sources in top-level modules named pyspark_* by listing sys.path (pkgutil.iter_modules), which
# does not see setuptools' editable finder: mpcommit-checkout.pth puts the checkout itself on the venv's path, so that
# Spark finds pyspark_mpcommit (df.write.format("mpcommit")) with no register call, as it does in a wheel install.
$(STAMP): pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[demo,test]'
	$(PY) -c 'import sysconfig; open(sysconfig.get_path("purelib") + "/mpcommit-checkout.pth", "w").write("$(CURDIR)\n")'
	touch $(STAMP)

localstack-install:
	bash localstack/install.sh

# Hadoop's S3A jars for the venv's PySpark (s3a/install.sh; needs Java 17 and Maven). Where they cannot be had,
# the tests that run Spark on s3a:// skip and say why -- except under CI=true, where that fails the run.
s3a-install: $(STAMP)
	@bash s3a/install.sh || { status=$$?; \
	  if [ "$${CI:-}" = "true" ]; then echo "s3a-install failed (exit $$status) and CI=true" >&2; exit $$status; fi; \
	  echo "s3a-install: continuing without the S3A jars; the s3a tests will be skipped" >&2; }

# The Go S3 servers (s3servers/install.sh: pinned module versions, built once per machine into ~/.cache/mpcommit/).
# Without a Go toolchain or the module proxy, their tests skip and say why -- except under CI=true, where that
# fails the run.
versitygw-install seaweedfs-install: %-install:
	@bash s3servers/install.sh $* >/dev/null || { status=$$?; \
	  if [ "$${CI:-}" = "true" ]; then echo "$*-install failed (exit $$status) and CI=true" >&2; exit $$status; fi; \
	  echo "$*-install: continuing without $*; its tests will be skipped" >&2; }

# docs/STORES.md from the store probes on all four servers (moto, LocalStack, versitygw, SeaweedFS).
stores-doc: $(STAMP) localstack-install versitygw-install seaweedfs-install
	$(PY) -m tests.stores.matrix --write

# Everything at once for 10 minutes (SOAK_ARGS="--minutes 60" for longer): docs/RELIABILITY.md, "Soak".
SOAK_ARGS ?=
soak: $(STAMP) localstack-install
	$(PY) -m tests.soak.soak --report soak-report.json $(SOAK_ARGS)

# The order trials' long tier (docs/RELIABILITY.md, "Randomized trials"): RACES_ARGS="--trials 200" trials per
# pairing on moto, then on LocalStack, niced; one JSON line per trial in tests/reliability/results/, then the table.
# Every pairing: the kills (6 pairings, a few seconds a trial) and, since issues 36 and 41, the pauses, brownouts,
# a store without conditional writes and mixed depths (5 pairings; a pause trial takes 20-45 s: several hours in
# all). RACES_ARGS="--pairing pause-driver,pause-recover --trials 50" for a part.
RACES_ARGS ?= --trials 200 --parallel 3
RACES_OUT  := tests/reliability/results
races: $(STAMP) localstack-install
	-nice -n 10 $(PY) -m tests.reliability.order_trials --server moto --pairing all --replace \
	  --out $(RACES_OUT)/order-trials-moto.jsonl $(RACES_ARGS)
	-nice -n 10 $(PY) -m tests.reliability.order_trials --server localstack --pairing all --replace \
	  --out $(RACES_OUT)/order-trials-localstack.jsonl $(RACES_ARGS)
	$(PY) -m tests.reliability.order_trials_report $(RACES_OUT)/order-trials-*.jsonl

bench: $(STAMP) s3a-install
	$(PY) -m pip install --quiet -e '.[bench]'
	$(PY) -m bench.run_all

clean:
	rm -rf $(VENV) localstack/.venv localstack/state s3a/jars .pytest_cache
