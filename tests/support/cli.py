"""Helpers for the CLI tests: run the real console script (and the cron script) in a subprocess against a test
backend, and create pending uploads quickly with a raw client."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "cleanup_orphaned_uploads.py"


def mpcommit_command() -> list[str]:
    """The installed console script next to this interpreter; ``python -m`` if it is not installed."""
    script = Path(sys.executable).with_name("mpcommit")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "mpcommit.cli.main"]


def cli_env(**extra: str) -> dict[str, str]:
    """Test credentials, no profile or endpoint leaking in from the environment, a wide fixed terminal."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(AWS_ACCESS_KEY_ID="test", AWS_SECRET_ACCESS_KEY="test", AWS_DEFAULT_REGION="us-east-1",
               AWS_CONFIG_FILE=os.devnull, AWS_SHARED_CREDENTIALS_FILE=os.devnull, COLUMNS="250")
    env.update(extra)
    return env


@dataclass
class Run:
    args: list[str]
    returncode: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        return json.loads(self.stdout)

    def __str__(self) -> str:
        return f"$ {' '.join(self.args)}\nexit {self.returncode}\n--- stdout\n{self.stdout}\n--- stderr\n{self.stderr}"


def run(command: list[str], *, env: dict[str, str] | None = None, timeout: float = 120, stdin: Any = subprocess.DEVNULL) -> Run:
    p = subprocess.run(command, capture_output=True, text=True, env=env or cli_env(), timeout=timeout, stdin=stdin)
    return Run(command, p.returncode, p.stdout, p.stderr)


def assert_clean_error(result: Run, code: int, *needles: str) -> None:
    """Exit ``code``, a message naming each needle on stderr, and no traceback."""
    assert result.returncode == code, str(result)
    assert "Traceback" not in result.stderr, str(result)
    for needle in needles:
        assert needle.lower() in result.stderr.lower(), str(result)


def cli(backend: Any) -> Callable[..., Run]:
    """``cli(backend)(*args)``: run the ``mpcommit`` console script against ``backend``."""
    def call(*args: str, **kwargs: Any) -> Run:
        return run([*mpcommit_command(), "--endpoint-url", backend.endpoint_url, *args], **kwargs)
    return call


def cleanup_script(backend: Any) -> Callable[..., Run]:
    """``cleanup_script(backend)(*args)``: run scripts/cleanup_orphaned_uploads.py against ``backend``."""
    def call(*args: str, **kwargs: Any) -> Run:
        return run([sys.executable, str(SCRIPT), "--endpoint-url", backend.endpoint_url, *args], **kwargs)
    return call


def data_key(prefix: str, job_id: str | None = None, *, task: int = 0, n: int = 0, partition: str = "") -> str:
    """A key shaped like mpcommit's data files (``part-TTTTT-JOBID.cNNN.txt``)."""
    job_id = job_id or str(uuid.uuid4())
    folder = f"{prefix}/{partition}/" if partition else f"{prefix}/"
    return f"{folder}part-{task:05d}-{job_id}.c{n:03d}.txt"


def start_uploads(client: Any, bucket: str, keys: list[str], *, with_part: bool = False, threads: int = 16) -> list[tuple[str, str]]:
    """Start one multipart upload per key (in parallel); with_part uploads a small first part to each."""
    def one(key: str) -> tuple[str, str]:
        upload_id = client.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
        if with_part:
            client.upload_part(Bucket=bucket, Key=key, UploadId=upload_id, PartNumber=1, Body=b"x" * 1000)
        return key, upload_id
    with ThreadPoolExecutor(threads) as pool:
        return list(pool.map(one, keys))
