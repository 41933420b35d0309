#!/usr/bin/env bash
# Fetch Hadoop's S3A connector for the installed PySpark into s3a/jars/ (hadoop-aws, the AWS SDK v2 modules it
# uses, spark-hadoop-cloud's commit protocol), with `mvn dependency:copy-dependencies` on s3a/pom.xml.
#
# PySpark's pip package ships Hadoop's client (hadoop-client-api-X.jar) but no hadoop-aws, so the JVM cannot open
# s3a:// paths until these jars are on its classpath (tests/support/spark_s3a.py puts them there). hadoop-aws must
# be exactly PySpark's Hadoop version: this script refuses to fetch a pom whose hadoop.version differs.
#
# Idempotent and cached: s3a/jars/.installed records a hash of the pom and PySpark's Hadoop version, then the jar
# names; when it matches and every jar is there, nothing is done. Maven keeps its own cache in ~/.m2.
#
# Usage: s3a/install.sh [--force]          (works from any cwd)
# Env:   MPCOMMIT_PYTHON   the interpreter whose PySpark the jars are for (default: the project's .venv/bin/python)
#        S3A_JARS_DIR      where to put the jars (default: s3a/jars)
# Exit:  0 ready; 1 cannot install (no Java, no Maven, Maven failed); 2 version mismatch or no PySpark.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(dirname "$HERE")"
POM="$HERE/pom.xml"
JARS="${S3A_JARS_DIR:-$HERE/jars}"
MARKER="$JARS/.installed"
PY="${MPCOMMIT_PYTHON:-$ROOT/.venv/bin/python}"

FORCE=0
if [[ "${1:-}" == "--force" ]]; then FORCE=1; fi

say() { echo "s3a/install.sh: $*" >&2; }

[[ -f "$POM" ]] || { say "missing $POM"; exit 1; }
if [[ ! -x "$PY" ]]; then
    say "no Python at $PY: run 'make install' first (or set MPCOMMIT_PYTHON)"
    exit 2
fi

# PySpark's Hadoop version, from the name of the hadoop-client-api jar it ships.
spark_jars="$("$PY" -c 'import os, pyspark; print(os.path.join(os.path.dirname(pyspark.__file__), "jars"))' 2>/dev/null)" || {
    say "PySpark is not installed in $PY: run 'make install' first"
    exit 2
}
shopt -s nullglob
api=("$spark_jars"/hadoop-client-api-*.jar)
shopt -u nullglob
if (( ${#api[@]} != 1 )); then
    say "expected one hadoop-client-api-*.jar in $spark_jars, found ${#api[@]}: cannot tell PySpark's Hadoop version"
    exit 2
fi
pyspark_hadoop="$(basename "${api[0]}" .jar)"
pyspark_hadoop="${pyspark_hadoop#hadoop-client-api-}"

pom_hadoop="$(sed -n 's:.*<hadoop.version>\(.*\)</hadoop.version>.*:\1:p' "$POM" | head -1)"
if [[ "$pom_hadoop" != "$pyspark_hadoop" ]]; then
    say "version mismatch: s3a/pom.xml lists hadoop-aws $pom_hadoop, but the installed PySpark ships Hadoop" \
        "$pyspark_hadoop (${api[0]}). S3A must match PySpark's Hadoop exactly: set <hadoop.version> in" \
        "s3a/pom.xml to $pyspark_hadoop (and the AWS SDK version to hadoop-project $pyspark_hadoop's" \
        "aws-java-sdk-v2.version), or install the PySpark that ships Hadoop $pom_hadoop."
    exit 2
fi

want="pom-sha256=$(sha256sum "$POM" | cut -d' ' -f1) pyspark-hadoop=$pyspark_hadoop"

already_installed() {
    [[ $FORCE -eq 0 && -f "$MARKER" ]] || return 1
    [[ "$(head -1 "$MARKER")" == "$want" ]] || return 1
    local jar
    while read -r jar; do
        [[ -f "$JARS/$jar" ]] || return 1
    done < <(tail -n +2 "$MARKER")
}

if already_installed; then
    exit 0
fi

missing=()
command -v java >/dev/null 2>&1 || missing+=("Java 17 (Debian/Ubuntu: apt-get install openjdk-17-jdk-headless)")
command -v mvn >/dev/null 2>&1 || missing+=("Maven 3.8+ (Debian/Ubuntu: apt-get install maven)")
if (( ${#missing[@]} )); then
    say "cannot fetch the S3A jars: install $(printf '%s; ' "${missing[@]}")then run 'make s3a-install'." \
        "Without them the tests that run Spark on s3:// (tests/interop) are skipped."
    exit 1
fi

mkdir -p "$JARS"
exec 9>"$JARS/.lock"
flock 9
if already_installed; then
    exit 0
fi

# Into a fresh folder first, so that an interrupted or failed fetch never leaves a half set behind a marker.
staging="$(mktemp -d "$JARS/.staging.XXXXXX")"
trap 'rm -rf "$staging"' EXIT
say "fetching hadoop-aws $pom_hadoop and its AWS SDK into $JARS (Maven cache: ~/.m2)"
started=$SECONDS
if ! mvn -q -B -f "$POM" dependency:copy-dependencies -Djars.dir="$staging" >"$staging/.mvn.log" 2>&1; then
    tail -20 "$staging/.mvn.log" >&2
    say "Maven could not fetch the jars (above: its last lines). Is Maven Central reachable? The tests that" \
        "run Spark on s3:// are skipped until 'make s3a-install' succeeds."
    exit 1
fi
rm -f "$staging/.mvn.log"

find "$JARS" -maxdepth 1 -name '*.jar' -delete
mv "$staging"/*.jar "$JARS"/
{
    echo "$want"
    (cd "$JARS" && ls -1 -- *.jar)
} >"$MARKER"
say "$(tail -n +2 "$MARKER" | wc -l) jars, $(du -sh "$JARS" | cut -f1), in $((SECONDS - started)) s: ready in $JARS"
