"""The soak (tests/soak/soak.py) for 60 seconds, on the session's cluster and LocalStack: everything at once
through the fault proxy, drivers killed, checked after every job and at the end. ``make soak`` runs it for
10 minutes (docs/RELIABILITY.md has the figures)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.soak.soak import Settings, Soak, summary
from tests.support.spark_cluster import StandaloneCluster


@pytest.mark.long
def test_a_minute_of_everything_at_once(spark_cluster: StandaloneCluster, cluster_backend: Any,
                                        tmp_path: Path) -> None:
    spark_cluster.ensure_workers()
    be = cluster_backend
    bucket = be.new_bucket("mpc-soak")
    soak = Soak(Settings(seconds=60), upstream=be.endpoint_url, raw_client=be.client, bucket=bucket,
                workdir=tmp_path / "soak", cluster=spark_cluster)
    report = soak.run()
    print(summary(report))
    assert report["violations"] == [], summary(report)
    # It did what it is for: jobs committed through faults while drivers died, and the checker looked.
    assert report["jobs"]["py"].get("committed", 0) >= 5, report["jobs"]
    assert sum(report["jobs"].get("spark", {}).values()) >= 1, report["jobs"]
    assert sum(report["faults"].values()) > 0 and report["latency spikes"]["count"] > 0
    assert sum(report["kills"].values()) > 0, report["kills"]
    assert report["checker rounds"] >= 5
