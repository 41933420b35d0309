"""Unknown credentials against a server that checks them (moto's server with its IAM checks on from the first
request): the first request of a job, a HEAD, is answered 403 without a reason; the error must still say the access
key is unknown, not that a permission is missing."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mpcommit import Job, S3Options
from mpcommit.errors import InvalidCredentialsError
from tests.support.servers import free_port


def test_an_unknown_access_key_is_named_though_the_first_head_says_only_403() -> None:
    port = free_port()
    server = subprocess.Popen([str(Path(sys.executable).with_name("moto_server")), "-p", str(port)],
                              env={**os.environ, "INITIAL_NO_AUTH_ACTION_COUNT": "0"},
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    pytest.fail("moto_server did not start")
                time.sleep(0.2)
        options = S3Options(endpoint_url=f"http://127.0.0.1:{port}", region="us-east-1",
                            access_key_id="AKIAUNKNOWN000000000", secret_access_key="not-a-secret")
        with pytest.raises(InvalidCredentialsError) as caught:
            Job.create("s3://some-bucket/t", s3=options)
        message = str(caught.value)
        assert message.startswith("head_bucket s3://some-bucket was refused (403")
        assert "InvalidAccessKeyId" in message and "the access key id is unknown" in message
        assert "permission" not in message
    finally:
        server.terminate()
        server.wait(timeout=30)
