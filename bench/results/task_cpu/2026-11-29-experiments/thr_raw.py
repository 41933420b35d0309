"""CPU per request by thread (the calling thread, the CRT event loop) for create + 1 KB part sent serially through S3Store (2026-11-29, 11:58-12:02 UTC; README.md here). Against bench.stub_s3 in another process."""
import sys, os, time
sys.path.insert(0, os.environ.get("WT") or str(__import__("pathlib").Path(__file__).resolve().parents[4]))
from bench.bench_commit_scale import Stub
from bench.common import ensure_bucket, make_client
from bench.profile_task_cpu import thread_cpu
from mpcommit import Job, S3Options
from mpcommit.sizing import crc32_b64
N = 3000
stub = Stub()
try:
    ensure_bucket(make_client(stub.endpoint), "pfbucket")
    options = S3Options(endpoint_url=stub.endpoint, region="us-east-1", access_key_id="test", secret_access_key="test")
    payload = os.urandom(int(sys.argv[1]) if len(sys.argv)>1 else 1000); crc = crc32_b64(payload)
    job = Job.create(f"s3://pfbucket/j-{time.time_ns()}", mode="append", s3=options)
    st = job.store
    for i in range(200):
        uid = st.create_multipart_upload("pfbucket", f"w/{i}", content_type="application/x")
    for rnd in range(3):
        a = thread_cpu(); s0 = stub.cpu_seconds()
        for i in range(N):
            uid = st.create_multipart_upload("pfbucket", f"raw/{i}", content_type="application/x")
            st.upload_part("pfbucket", f"raw/{i}", uid, 1, payload, crc)
        b = thread_cpu(); s1 = stub.cpu_seconds()
        out = {}
        for tid, (name, c) in b.items():
            d = c - a.get(tid, (name, 0.0))[1]
            if d > 0: out[name] = out.get(name, 0) + d
        print({k: round(v / (2*N) * 1e6, 1) for k, v in out.items()}, "us per request; server", round((s1-s0)/(2*N)*1e6,1), flush=True)
finally:
    stub.stop()
