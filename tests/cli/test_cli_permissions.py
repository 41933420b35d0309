"""Wrong credentials and missing permissions, on a moto server of its own that checks signatures and IAM policies
(``INITIAL_NO_AUTH_ACTION_COUNT``: the first few requests set up a user, every later one is authorized)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass

import boto3
import pytest

from tests.support.servers import free_port

from tests.support.cli import assert_clean_error, cli_env, mpcommit_command, run

BUCKET = "perm-test"
KEYS = ("t/a", "t/b")
#: create_bucket, two create_multipart_upload, create_user, put_user_policy, create_access_key
SETUP_REQUESTS = 6
#: The cleaner may list and measure uploads, but not abort them nor touch lifecycle rules.
POLICY = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Resource": "*", "Action": [
    "s3:ListBucket", "s3:ListBucketMultipartUploads", "s3:ListMultipartUploadParts", "s3:GetObject"]}]}


@dataclass
class AuthServer:
    endpoint_url: str
    access_key_id: str
    secret_access_key: str


@pytest.fixture(scope="module")
def auth_server() -> Iterator[AuthServer]:
    port = free_port()
    env = {**cli_env(), "INITIAL_NO_AUTH_ACTION_COUNT": str(SETUP_REQUESTS)}
    server = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:  # a bare TCP connect: an HTTP request could count as one of the setup requests
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise RuntimeError("the moto server with authentication did not start") from None
                time.sleep(0.2)
        endpoint = f"http://127.0.0.1:{port}"
        kw = {"endpoint_url": endpoint, "aws_access_key_id": "test", "aws_secret_access_key": "test",
              "region_name": "us-east-1"}
        s3, iam = boto3.client("s3", **kw), boto3.client("iam", **kw)
        s3.create_bucket(Bucket=BUCKET)
        for key in KEYS:
            s3.create_multipart_upload(Bucket=BUCKET, Key=key)
        iam.create_user(UserName="cleaner")
        iam.put_user_policy(UserName="cleaner", PolicyName="list-only", PolicyDocument=json.dumps(POLICY))
        key = iam.create_access_key(UserName="cleaner")["AccessKey"]
        yield AuthServer(endpoint, key["AccessKeyId"], key["SecretAccessKey"])
    finally:
        server.terminate()
        server.wait(timeout=30)


def as_cleaner(server: AuthServer, *args: str):  # noqa: ANN201
    env = cli_env(AWS_ACCESS_KEY_ID=server.access_key_id, AWS_SECRET_ACCESS_KEY=server.secret_access_key)
    return run([*mpcommit_command(), "--endpoint-url", server.endpoint_url, *args], env=env)


def test_unknown_credentials_are_named_as_such(auth_server):
    result = run([*mpcommit_command(), "--endpoint-url", auth_server.endpoint_url, "uploads", "list",
                  f"s3://{BUCKET}/t"])  # test/test: not a key this server knows
    assert_clean_error(result, 1, "InvalidAccessKeyId", "access key id is unknown")


def test_missing_permissions_give_a_clear_failure_and_change_nothing(auth_server):
    listed = as_cleaner(auth_server, "uploads", "list", f"s3://{BUCKET}/t", "--json")
    assert listed.returncode == 0, listed
    assert sorted(u["key"] for u in listed.json()["uploads"]) == list(KEYS)

    aborted = as_cleaner(auth_server, "uploads", "abort", f"s3://{BUCKET}/t", "--older-than", "1s", "--yes", "--json")
    assert aborted.returncode == 1, aborted
    report = aborted.json()
    assert report["aborted"] == 0 and report["failed"] >= 1 and report["failed"] + report["notDone"] == 2
    assert "AccessDenied" in aborted.stderr and "Traceback" not in aborted.stderr
    assert len(as_cleaner(auth_server, "uploads", "list", f"s3://{BUCKET}/t", "--json").json()["uploads"]) == 2

    assert_clean_error(as_cleaner(auth_server, "lifecycle", BUCKET, "--abort-incomplete-days", "7"), 1, "AccessDenied")
