"""Where mpcommit's AWS sessions and clients are made: S3's for the store, Glue's for the catalog above.

One place, so that every client has the same credentials sources (profile, keys, boto3's chain), the same
timeouts and botocore's own retries off -- the project has one retry boundary (store/retry.py) -- and so that
botocore and boto3 are imported only below this line (the catalog asks for a Glue client here).
"""

from __future__ import annotations

from typing import Any

import boto3
import botocore.session
from botocore.config import Config
from botocore.exceptions import BotoCoreError

from ..errors import UsageError
from ..options import S3Options

#: botocore's own retries off: every request is retried by store/retry.py, once, with backoff and jitter.
NO_RETRIES = {"total_max_attempts": 1, "mode": "standard"}


def aws_session(options: S3Options, *, region: str | None = None) -> Any:
    """A boto3 session with the credentials, profile and region of ``options``."""
    return boto3.session.Session(
        profile_name=options.profile,
        aws_access_key_id=options.access_key_id,
        aws_secret_access_key=options.secret_access_key,
        aws_session_token=options.session_token,
        region_name=region or options.region,
    )


def s3_client(options: S3Options) -> tuple[Any, Any, str | None]:
    """A boto3 S3 client for ``options``, the credentials it signs with (None when there are none) and the CA
    bundle it verifies TLS with when one is configured (AWS_CA_BUNDLE or the profile's ca_bundle). A profile
    that does not exist or a malformed endpoint is the caller's configuration mistake: UsageError."""
    try:
        session = aws_session(options)
        config = Config(
            s3={"addressing_style": options.addressing_style},
            retries=NO_RETRIES,
            max_pool_connections=options.max_pool_connections,
            connect_timeout=options.connect_timeout,
            read_timeout=options.read_timeout,
            # Parts carry our own CRC32; botocore adds no checksums to every other request.
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
        )
        client = session.client("s3", endpoint_url=options.endpoint_url, config=config)
    except (BotoCoreError, ValueError) as exc:
        raise UsageError(f"cannot set up an S3 client: {exc} (check the profile (AWS_PROFILE) and the endpoint "
                         "(S3Options(endpoint_url=...), AWS_ENDPOINT_URL))") from exc
    core = getattr(session, "_session", None)  # botocore's session: where boto3 resolves ca_bundle too
    ca_bundle = core.get_config_variable("ca_bundle") if core is not None else None
    return client, session.get_credentials(), ca_bundle


def glue_client(options: S3Options, *, endpoint_url: str | None = None, region: str | None = None) -> Any:
    """A boto3 Glue client with the credentials, profile, region and timeouts of ``options``. Its endpoint is
    ``endpoint_url`` or boto3's own sources (AWS_ENDPOINT_URL_GLUE, AWS_ENDPOINT_URL), never the S3 endpoint of
    ``options``: an S3-compatible store or an S3 VPC endpoint does not serve Glue. Raises botocore's errors (a
    missing region) for the caller to name."""
    config = Config(retries=NO_RETRIES, connect_timeout=options.connect_timeout, read_timeout=options.read_timeout)
    return aws_session(options, region=region).client("glue", endpoint_url=endpoint_url, config=config)


def s3_service_model() -> Any:
    """botocore's own model of S3, for a client that carries none (a stand-in client in tests)."""
    return botocore.session.get_session().get_service_model("s3")
