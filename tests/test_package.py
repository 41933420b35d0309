"""What ``import mpcommit`` loads: the commit protocol, not the catalogs above it (Glue, Spark SQL)."""

from __future__ import annotations

import json
import subprocess
import sys


def test_importing_mpcommit_loads_no_catalog() -> None:
    # A fresh interpreter: this one has imported the catalogs for other tests already.
    code = "import json, sys, mpcommit; print(json.dumps(sorted(m for m in sys.modules if m.startswith('mpcommit'))))"
    loaded = json.loads(subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout)
    assert "mpcommit.protocol.job" in loaded
    assert [m for m in loaded if m.startswith("mpcommit.catalog")] == []
