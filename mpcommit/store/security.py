"""The security parameters every request carries, decided in one place.

:func:`security_parameters` is the one function that says which of them a request gets: the store's funnel
(``S3Store._call``) adds them to every boto3 request, and the CRT transport puts the same ones on the commit's
completes as headers (:func:`mpcommit.store.transport.header_fields`), so that the request sent a hundred thousand
times per commit can never miss one added here later. They are given by botocore's parameter names and added
wherever the operation accepts them (botocore's model says which do), with the values on the wire.
"""

from __future__ import annotations

import base64
import hashlib
from typing import Any

from botocore import xform_name

from ..options import S3Options
from .session import s3_service_model


def security_parameters(options: S3Options, operation: Any) -> dict[str, str]:
    """The parameters ``options`` adds to a request of ``operation`` (a botocore OperationModel): server-side
    encryption (SSE-S3/KMS where an object is created, SSE-C wherever an object or its parts are written or read,
    and on the source of a copy), and the expected owner of the bucket (and of a copy's source bucket)."""
    members = operation.input_shape.members if operation.input_shape is not None else {}
    params: dict[str, str] = {}
    if options.sse and "ServerSideEncryption" in members:
        params["ServerSideEncryption"] = options.sse
        if options.sse_kms_key_id:
            params["SSEKMSKeyId"] = options.sse_kms_key_id
    if options.sse_customer_key is not None:
        # Given as they go on the wire (the key and its MD5 in base64), so that botocore adds nothing of its own.
        key = base64.b64encode(options.sse_customer_key).decode()
        digest = base64.b64encode(hashlib.md5(options.sse_customer_key).digest()).decode()  # noqa: S324 - S3's rule
        for prefix in ("SSECustomer", "CopySourceSSECustomer"):
            if f"{prefix}Key" in members:
                params.update({f"{prefix}Algorithm": "AES256", f"{prefix}Key": key, f"{prefix}KeyMD5": digest})
    if options.expected_bucket_owner:
        for name in ("ExpectedBucketOwner", "ExpectedSourceBucketOwner"):
            if name in members:
                params[name] = options.expected_bucket_owner
    return params


class RequestSecurity:
    """:func:`security_parameters` for one store's options and client, remembered per operation (a request costs
    a dict lookup, not a walk of botocore's model)."""

    def __init__(self, options: S3Options, client: Any):
        self._options = options
        self._client = client
        self._model: Any = None
        self._api_names: dict[str, str] = {}
        self._by_operation: dict[str, dict[str, str]] = {}

    def parameters(self, operation: str) -> dict[str, str]:
        """For ``operation`` by the client's method name (``complete_multipart_upload``)."""
        found = self._by_operation.get(operation)
        if found is None:
            found = self._by_operation[operation] = security_parameters(self._options, self.operation_model(operation))
        return found

    def operation_model(self, operation: str) -> Any:
        if self._model is None:
            meta = self._client.meta
            model = getattr(meta, "service_model", None)
            if model is None:  # a stand-in client (tests): botocore's own S3 model
                model = s3_service_model()
            self._api_names = {xform_name(name): name for name in model.operation_names}
            self._model = model
        return self._model.operation_model(self._api_names[operation])
