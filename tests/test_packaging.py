"""What an install pulls in: `pip install mpcommit` (every executor) gets no S3 test server and no engine; the demo
says which extra it needs when it is missing; the extras pin what the engine supports."""

from __future__ import annotations

import ast
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement

PACKAGE = Path(__file__).resolve().parents[1] / "mpcommit"


def requirements(extra: str | None) -> dict[str, Requirement]:
    """The installed distribution's requirements for ``extra`` (None: a plain install), by project name."""
    found = {}
    for text in metadata.requires("mpcommit") or []:
        req = Requirement(text)
        applies = req.marker is None if extra is None else (
            req.marker is not None and req.marker.evaluate({"extra": extra}))
        if applies:
            found[req.name.lower()] = req
    return found


def test_a_plain_install_pulls_no_server_and_no_engine() -> None:
    core = requirements(None)
    assert {"boto3", "pyarrow"} <= set(core)
    assert not {"moto", "flask", "werkzeug", "pyspark", "pandas", "grpcio"} & set(core), sorted(core)


def test_the_extras_hold_what_the_demo_the_engine_and_connect_need() -> None:
    demo, spark, connect, test = (requirements(e) for e in ("demo", "spark", "connect", "test"))
    assert "moto" in demo and "server" in demo["moto"].extras
    # PySpark 4 warns that it does not support pandas 3 (a FutureWarning on every mapInArrow).
    assert not spark["pandas"].specifier.contains("3.0.0") and spark["pandas"].specifier.contains("2.3.3")
    assert "connect" in connect["pyspark"].extras
    assert {"spark", "connect", "demo"} <= set(test["mpcommit"].extras), "the tests run the demo and Connect"


def module_level_imports(tree: ast.Module) -> list[str]:
    """Top-level names a module imports when it is imported: not inside functions or classes, nor under
    ``if TYPE_CHECKING``; relative imports left out."""
    found: list[str] = []
    pending: list[ast.stmt] = list(tree.body)
    while pending:
        node = pending.pop()
        if isinstance(node, ast.Import):
            found += [a.name.split(".")[0] for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append(node.module.split(".")[0])
        elif isinstance(node, ast.If) and not (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"):
            pending += node.body + node.orelse
        elif isinstance(node, ast.Try):
            pending += node.body + node.orelse + node.finalbody + [s for h in node.handlers for s in h.body]
    return found


#: Modules that subclass PySpark's classes, so import pyspark when loaded: the data source's classes, which only Spark
#: loads (through pyspark_mpcommit) and mpcommit.spark.register, inside the function. test_spark_imports.py checks
#: that ``import mpcommit.spark`` and the data source's own modules load no pyspark.
ONLY_SPARK_LOADS = {("pyspark", "mpcommit/spark/pyspark_source.py")}


def test_every_module_imports_only_what_a_plain_install_brings() -> None:
    # What `pip install mpcommit` installs: its requirements and theirs. A module that imports anything else at
    # import time breaks every executor that has only mpcommit (numpy, once, was such an import).
    installed, pending = set(), list(requirements(None))
    while pending:
        name = pending.pop()
        if name not in installed:
            installed.add(name)
            pending += [Requirement(r).name.lower() for r in metadata.requires(name) or []
                        if Requirement(r).marker is None]
    owners = metadata.packages_distributions()
    missing = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        for top in module_level_imports(ast.parse(path.read_text(), str(path))):
            if top in sys.stdlib_module_names or top == "mpcommit":
                continue
            if (top, path.relative_to(PACKAGE.parent).as_posix()) in ONLY_SPARK_LOADS:
                continue
            dists = {d.lower() for d in owners.get(top, [top])}
            if not dists & installed:
                missing.setdefault(path.relative_to(PACKAGE.parent).as_posix(), []).append(top)
    assert not missing, f"imported at import time but not installed by `pip install mpcommit`: {missing}"


def test_only_the_embedded_server_imports_moto() -> None:
    importers = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            if any(n == "moto" or n.startswith("moto.") for n in names):
                importers.append(path.relative_to(PACKAGE.parent).as_posix())
    assert importers == ["mpcommit/demo/embedded_s3.py"]


# A process in which the named top-level packages cannot be imported, as after `pip install mpcommit`.
WITHOUT = """
import sys
from importlib.abc import MetaPathFinder

class Missing(MetaPathFinder):
    def __init__(self, names):
        self.names = names

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in self.names:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, Missing(set(sys.argv.pop(1).split(","))))
"""


def run_without(packages: str, code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", WITHOUT + code, packages], capture_output=True, text=True,
                          timeout=120)


def test_the_demo_without_its_extra_says_what_to_install() -> None:
    cli = "from mpcommit.cli.main import main; sys.exit(main(['demo']))"
    done = run_without("moto", cli)
    assert done.returncode == 2, done.stderr
    assert "moto's S3 server" in done.stderr and "pip install 'mpcommit[demo]'" in done.stderr
    assert "PySpark" not in done.stderr, "only what is missing is named"
    done = run_without("moto,pyspark", cli)
    assert done.returncode == 2 and "PySpark and moto's S3 server" in done.stderr, done.stderr
    done = run_without("moto", "from mpcommit.demo.main_job import main; sys.exit(main([]))")  # python -m mpcommit.demo
    assert done.returncode == 2 and "pip install 'mpcommit[demo]'" in done.stderr, done.stderr


def test_the_embedded_server_without_moto_says_what_to_install() -> None:
    done = run_without("moto", "from mpcommit.demo.embedded_s3 import EmbeddedS3Server\n"
                               "try:\n    EmbeddedS3Server().start()\n"
                               "except Exception as exc:\n    print(type(exc).__name__, exc)")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("UsageError the demo needs moto's S3 server"), done.stdout
    assert "pip install 'mpcommit[demo]'" in done.stdout
