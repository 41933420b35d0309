"""s3a/install.sh and the jar check of tests/support/spark_s3a.py on bad input, without Maven Central: no Java or
no Maven, a pom whose Hadoop differs from PySpark's, Maven failing, jars missing. Each says what is wrong and
what to do. (The real fetch runs in `make s3a-install`; the interop tests use its jars.)"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import spark_s3a

INSTALL = spark_s3a.S3A_DIR / "install.sh"
#: What install.sh runs besides java and mvn.
TOOLS = ["bash", "dirname", "basename", "sed", "head", "tail", "sha256sum", "cut", "mkdir", "mktemp", "flock",
         "find", "mv", "ls", "wc", "du", "rm", "cat"]


def s3a_copy(tmp_path: Path, *, hadoop: str | None = None) -> Path:
    """install.sh and its pom in a scratch folder (optionally with another hadoop.version)."""
    folder = tmp_path / "s3a"
    folder.mkdir()
    shutil.copy(INSTALL, folder / "install.sh")
    pom = spark_s3a.POM.read_text()
    if hadoop is not None:
        pom = pom.replace(f"<hadoop.version>{spark_s3a.pom_versions()['hadoop.version']}<", f"<hadoop.version>{hadoop}<")
    (folder / "pom.xml").write_text(pom)
    return folder


def bin_dir(tmp_path: Path, *, with_java: bool, mvn_script: str | None) -> Path:
    """A PATH folder with the tools install.sh needs, java only if asked, and ``mvn_script`` as mvn."""
    folder = tmp_path / "bin"
    folder.mkdir()
    for tool in TOOLS + (["java"] if with_java else []):
        found = shutil.which(tool)
        assert found, f"{tool} is not installed"
        (folder / tool).symlink_to(found)
    if mvn_script is not None:
        (folder / "mvn").write_text(f"#!/bin/sh\n{mvn_script}\n")
        (folder / "mvn").chmod(0o755)
    return folder


def run_install(folder: Path, path: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MPCOMMIT_PYTHON": sys.executable, "S3A_JARS_DIR": str(folder / "jars")}
    if path is not None:
        env["PATH"] = str(path)
    return subprocess.run(["bash", str(folder / "install.sh")], env=env, capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)


def test_a_pom_for_another_hadoop_than_pysparks_is_refused_naming_both(tmp_path: Path) -> None:
    folder = s3a_copy(tmp_path, hadoop="3.4.1")
    result = run_install(folder)
    ours = spark_s3a.pyspark_hadoop_version()
    assert result.returncode == 2, result
    assert "version mismatch" in result.stderr and "hadoop-aws 3.4.1" in result.stderr, result.stderr
    assert f"ships Hadoop {ours}" in result.stderr, result.stderr
    assert not (folder / "jars").exists(), "nothing fetched"


@pytest.mark.parametrize("with_java,with_mvn,named", [
    (False, True, ["Java 17"]), (True, False, ["Maven"]), (False, False, ["Java 17", "Maven"])])
def test_no_java_or_no_maven_says_what_to_install(tmp_path: Path, with_java: bool, with_mvn: bool,
                                                  named: list[str]) -> None:
    folder = s3a_copy(tmp_path)
    path = bin_dir(tmp_path, with_java=with_java, mvn_script="exit 99" if with_mvn else None)
    result = run_install(folder, path)
    assert result.returncode == 1, result
    for what in named:
        assert f"install {what}" in result.stderr or f"; {what}" in result.stderr, result.stderr
    assert ("Maven 3.8+" in result.stderr) is not with_mvn and ("Java 17" in result.stderr) is not with_java
    assert "apt-get install" in result.stderr and "make s3a-install" in result.stderr, result.stderr
    assert "skipped" in result.stderr


def test_maven_failing_leaves_no_jars_and_says_so(tmp_path: Path) -> None:
    folder = s3a_copy(tmp_path)
    path = bin_dir(tmp_path, with_java=True,
                   mvn_script="echo 'Could not transfer artifact org.apache.hadoop:hadoop-aws'; exit 1")
    result = run_install(folder, path)
    assert result.returncode == 1, result
    assert "Could not transfer artifact" in result.stderr and "Maven could not fetch the jars" in result.stderr
    assert not list((folder / "jars").glob("*.jar")) and not (folder / "jars" / ".installed").exists()


def test_missing_jars_are_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    jars = tmp_path / "jars"
    monkeypatch.setattr(spark_s3a, "JARS_DIR", jars)
    monkeypatch.setattr(spark_s3a, "MARKER", jars / ".installed")
    versions = spark_s3a.pom_versions()
    problem = spark_s3a.s3a_jars_problem()
    assert problem is not None and f"hadoop-aws-{versions['hadoop.version']}.jar" in problem
    assert "make s3a-install" in problem and "Maven" in problem

    # Installed once, then a jar deleted: that jar is named.
    jars.mkdir()
    names = spark_s3a.expected_jar_names() + ["sdk-core-x.jar"]
    for name in names:
        (jars / name).write_bytes(b"")
    (jars / ".installed").write_text("pom-sha256=x pyspark-hadoop=y\n" + "\n".join(names) + "\n")
    assert spark_s3a.s3a_jars_problem() is None
    (jars / "sdk-core-x.jar").unlink()
    assert "sdk-core-x.jar" in (spark_s3a.s3a_jars_problem() or "")
