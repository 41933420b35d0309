"""``bench.profile_task_cpu`` with parts of a task's path taken away, one run per call; used on 2026-11-29
(12:00-12:15 UTC) to split a task's CPU per extra file (README.md here). Each switch is an environment variable:

    FAKE=1      the store answers CreateMultipartUpload and UploadPart in-process at once (no request, no CRT)
    INLINE=1    the task's upload pool runs each work item on the calling thread (no pool thread)
    RAWSOCK=1   the CRT transport's create and part replaced by a blocking request on a plain socket, sent and read
                on the calling thread (with INLINE: no thread but the task's runs Python)
    SPILL=N     the spill's buffer N MiB (8 by default)
    WT=dir      the checkout whose code runs (default: the repository this file is in)

    FAKE=1 INLINE=1 python bench/results/task_cpu/2026-11-29-experiments/decompose_task_cpu.py --values 1250 --no-profile
"""

from __future__ import annotations

import itertools
import os
import socket
import sys
from concurrent.futures import Executor, Future
from pathlib import Path

sys.path.insert(0, os.environ.get("WT") or str(Path(__file__).resolve().parents[4]))

from bench import profile_task_cpu  # noqa: E402
from mpcommit.formats.partitioning import PartitionedWriter  # noqa: E402
from mpcommit.protocol import task as task_module  # noqa: E402
from mpcommit.store import crt_transport  # noqa: E402
from mpcommit.store.s3 import S3Store  # noqa: E402
from mpcommit.store.transport import etag_from_headers, part_query, upload_id_from_answer, uploads_query  # noqa: E402


class Inline(Executor):
    def submit(self, fn, *args, **kwargs):  # type: ignore[no-untyped-def]
        future: Future = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as exc:  # noqa: BLE001
            future.set_exception(exc)
        return future


def raw_request(self, method, bucket, tail, body, headers, _conns={}):  # type: ignore[no-untyped-def]
    base, base_path, host = self._base(bucket)
    signed = self.signed_request(base_path + tail, host.host_header, body, method=method, headers=headers)
    if host.host_header not in _conns:
        sock = socket.create_connection((host.host, host.port))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        _conns[host.host_header] = (sock, sock.makefile("rb"))
    sock, reader = _conns[host.host_header]
    head = f"{method} {base_path + tail} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in signed.headers) + "\r\n"
    sock.sendmsg([head.encode("latin-1"), body])
    status = int(reader.readline().split()[1])
    answer = {}
    while (line := reader.readline()) not in (b"\r\n", b"\n", b""):
        name, _, value = line.decode("latin-1").partition(":")
        answer[name.strip().lower()] = value.strip()
    return status, answer, reader.read(int(answer.get("content-length", "0")))


def raw_create(self, bucket, key, *, content_type=None):  # type: ignore[no-untyped-def]
    headers = [("x-amz-checksum-algorithm", "CRC32")] + ([("Content-Type", content_type)] if content_type else [])
    status, _, data = raw_request(self, "POST", bucket, uploads_query(key), b"",
                                  headers + self._operation_headers["create_multipart_upload"])
    return upload_id_from_answer(status, data)


def raw_part(self, bucket, key, upload_id, number, body, crc32):  # type: ignore[no-untyped-def]
    headers = [("x-amz-sdk-checksum-algorithm", "CRC32"), ("x-amz-checksum-crc32", crc32)]
    status, answer, data = raw_request(self, "PUT", bucket, part_query(key, upload_id, number), body,
                                       headers + self._operation_headers["upload_part"])
    return etag_from_headers(status, answer, data, "UploadPart"), answer.get("x-amz-checksum-crc32")


if os.environ.get("SPILL"):
    PartitionedWriter.__init__.__kwdefaults__["spill_buffer_bytes"] = int(os.environ["SPILL"]) << 20
if os.environ.get("INLINE"):
    task_module.TaskAttempt._pool = lambda self: Inline()  # type: ignore[method-assign]
if os.environ.get("RAWSOCK"):
    crt_transport.CrtCompleter.create_multipart_upload = raw_create  # type: ignore[method-assign]
    crt_transport.CrtCompleter.upload_part = raw_part  # type: ignore[method-assign]
if os.environ.get("FAKE"):
    numbers = itertools.count()
    S3Store.create_multipart_upload = lambda self, bucket, key, content_type=None: f"u{next(numbers)}"  # type: ignore[method-assign]
    S3Store.upload_part = lambda self, bucket, key, upload_id, number, body, crc32: '"etag"'  # type: ignore[method-assign]

if __name__ == "__main__":
    raise SystemExit(profile_task_cpu.main())
