"""s3servers/: the scripts that build and start the Go S3 servers say what is wrong and how to fix it."""

from __future__ import annotations

import os
import subprocess

from tests.support.servers import S3SERVERS_DIR

INSTALL = str(S3SERVERS_DIR / "install.sh")
START = str(S3SERVERS_DIR / "start.sh")


def run(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(args), capture_output=True, text=True, timeout=60, env={**os.environ, **env},
                          stdin=subprocess.DEVNULL)


def test_versions_are_pinned_and_listed():
    listed = dict(line.split() for line in run(INSTALL, "--versions").stdout.splitlines())
    assert set(listed) == {"versitygw", "seaweedfs"}
    assert listed["versitygw"].startswith("v1.") and listed["seaweedfs"].startswith("v0.0.0-")


def test_an_unbuilt_server_has_no_path_and_without_go_says_what_to_install(tmp_path):
    cache = str(tmp_path / "cache")
    assert run(INSTALL, "versitygw", "--path", MPCOMMIT_CACHE=cache).returncode == 3
    no_go = run(INSTALL, "versitygw", MPCOMMIT_CACHE=cache, GO=str(tmp_path / "no-go"))
    assert no_go.returncode == 1
    assert "no Go toolchain" in no_go.stderr and "go.dev/dl" in no_go.stderr and "make versitygw-install" in no_go.stderr
    assert not any((tmp_path / "cache").rglob("versitygw")), "no binary may be left behind a failed build"


def test_bad_usage_is_refused_with_the_usage():
    for args in ((INSTALL,), (INSTALL, "minio"), (INSTALL, "versitygw", "--fast"), (START, "versitygw", "x", "/tmp/d"),
                 (START, "nginx", "1234", "/tmp/d")):
        result = run(*args)
        assert result.returncode == 2 and "usage" in result.stderr, (args, result.stderr)


def test_start_refuses_a_server_that_is_not_built(tmp_path):
    result = run(START, "versitygw", "1234", str(tmp_path / "data"), MPCOMMIT_CACHE=str(tmp_path / "cache"))
    assert result.returncode == 1 and "make versitygw-install" in result.stderr
