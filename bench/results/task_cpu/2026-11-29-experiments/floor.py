"""The floor of awscrt.http: prebuilt unsigned requests on one connection, waited for; CPU per request by thread ("cb": with Python callbacks for the answer, "nocb": without) ; "s3client": the same requests through awscrt.s3.S3Client's DEFAULT meta-requests, signed in C (2026-11-29, 11:58-12:02 UTC; README.md here). Against bench.stub_s3 in another process."""
import io
import os
import sys
sys.path.insert(0, os.environ.get("WT") or str(__import__("pathlib").Path(__file__).resolve().parents[4]))
from bench.bench_commit_scale import Stub
from bench.common import ensure_bucket, make_client
from bench.profile_task_cpu import thread_cpu
from awscrt import auth, http, io as cio, s3
N = 4000
stub = Stub()
try:
    ensure_bucket(make_client(stub.endpoint), "pfbucket")
    port = int(stub.endpoint.rsplit(":", 1)[1])
    elg = cio.EventLoopGroup(1); boot = cio.ClientBootstrap(elg, cio.DefaultHostResolver(elg))
    mode = sys.argv[1]
    if mode == "s3client":
        client = s3.S3Client(bootstrap=boot, region="us-east-1", tls_mode=s3.S3RequestTlsMode.DISABLED,
                             credential_provider=auth.AwsCredentialsProvider.new_static("test", "test"))
    else:
        conn = http.HttpClientConnection.new("127.0.0.1", port, boot, cio.SocketOptions(), None).result()
    payload = os.urandom(1000)
    def one(i):
        if i % 2 == 0:
            req = http.HttpRequest("POST", f"/pfbucket/raw/{i}?uploads", http.HttpHeaders([("Host", f"127.0.0.1:{port}"), ("Content-Length", "0")]), io.BytesIO(b""))
        else:
            req = http.HttpRequest("PUT", f"/pfbucket/raw/{i-1}?partNumber=1&uploadId=x", http.HttpHeaders([("Host", f"127.0.0.1:{port}"), ("Content-Length", str(len(payload)))]), io.BytesIO(payload))
        chunks = []
        if mode == "s3client":
            m = client.make_request(type=s3.S3RequestType.DEFAULT, request=req,
                                    operation_name="CreateMultipartUpload" if i % 2 == 0 else "UploadPart",
                                    on_headers=lambda status_code, headers, **k: None,
                                    on_body=lambda chunk, offset, **k: chunks.append(bytes(chunk)))
            return m.finished_future.result()
        if mode == "cb":
            s = conn.request(req, on_body=lambda http_stream, chunk, **k: chunks.append(bytes(chunk)), on_response=lambda http_stream, status_code, headers, **k: None)
        else:
            s = conn.request(req)
        s.activate()
        return s.completion_future.result()
    for i in range(200): one(i)
    for rnd in range(3):
        a = thread_cpu()
        for i in range(N): one(i)
        b = thread_cpu()
        out = {}
        for tid, (name, c) in b.items():
            d = c - a.get(tid, (name, 0.0))[1]
            if d > 0: out[name] = out.get(name, 0) + d
        print(mode, {k: round(v / N * 1e6, 1) for k, v in out.items()}, "us per request", flush=True)
finally:
    stub.stop()
