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


def test_a_pyarrow_that_needs_numpy_2_beside_numpy_1_is_named_at_import_with_the_fix() -> None:
    """pyarrow 26 needs NumPy 2 and PySpark 3.5's extras pin NumPy below 2; pip cannot see it (pyarrow declares no
    NumPy), so such an install fails at import of the Spark binding (on the driver, and in every task): the
    failure says what to install. (Seen: Python 3.11 with
    pyspark[connect]==3.5.9 got pyarrow 26.0.1 and NumPy 1.26.4.)"""
    code = """
import sys
from importlib.abc import MetaPathFinder

class PyarrowOnNumpy1(MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "pyarrow":
            raise ImportError("pyarrow requires NumPy 2.0 or newer, found 1.26.4")
        return None

sys.meta_path.insert(0, PyarrowOnNumpy1())
import mpcommit.spark
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: pyarrow requires NumPy 2.0 or newer, found 1.26.4. PySpark 3.5's extras pin "
                           "NumPy below 2"), done.stderr[-2000:]
    assert "pip install 'pyarrow<26'" in last
