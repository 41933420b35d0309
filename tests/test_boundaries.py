"""The boundaries the package's docstrings and docs/ARCHITECTURE.md claim, checked on the imports themselves
(every import statement, those inside functions too), so that a claim cannot outlive the code it describes."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "mpcommit"

#: Dependencies point down this list (docs/ARCHITECTURE.md): a module may import its own layer and those
#: below, never one above.
LAYERS: dict[str, int] = {
    "errors": 0, "options": 0, "modes": 0, "sizing": 0, "units": 0, "pool": 0,
    "store": 1,
    "protocol": 2,
    "formats": 3, "compaction": 3, "operations": 3, "catalog": 3,
    "spark": 4, "cli": 4, "demo": 4,
}

#: Third-party libraries and the only parts of mpcommit that may import them.
ONLY_IN: dict[str, tuple[str, ...]] = {
    "boto3": ("store.session",),   # the one AWS boundary: store/session.py makes every client, Glue's too
    "botocore": ("store",),        # its exceptions, model and endpoint rules, which the store's requests speak
    # the CRT transport of CompleteMultipartUpload and a task's requests (its connections), nothing else
    "awscrt": ("store.crt_transport", "store.crt_connections"),
    "urllib3": ("store",),
    "tenacity": (),                # no longer used: the retry policy is store/retry.py's own (Attempts)
    "pyspark": ("spark", "catalog", "demo"),  # the Spark binding, the Spark session catalog, and the demo job
    "click": ("cli",),
    "moto": ("demo",),
}


def modules() -> Iterator[tuple[str, Path]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        yield ".".join(p for p in parts if p != "__init__"), path


def imports(name: str, path: Path) -> Iterator[tuple[str, int]]:
    """(imported module, line) of every import in the module, relative ones resolved to 'mpcommit.x.y'."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = ["mpcommit", *package][: len(package) + 1 - (node.level - 1)]
                yield ".".join(base + ([node.module] if node.module else [])), node.lineno
            else:
                yield node.module or "", node.lineno


def layer_of(name: str) -> int | None:
    return LAYERS.get(name.split(".")[0]) if name else None


def test_every_module_has_a_layer() -> None:
    unplaced = sorted(n for n, _ in modules() if n and layer_of(n) is None)
    assert not unplaced, f"modules outside the layers of docs/ARCHITECTURE.md: {unplaced}"


def test_no_import_points_up_the_layers() -> None:
    upward = []
    for name, path in modules():
        if not name:
            continue  # mpcommit/__init__.py: the public names, from any layer
        for target, line in imports(name, path):
            if not target.startswith("mpcommit."):
                continue
            inner = target[len("mpcommit."):]
            if layer_of(inner) is not None and layer_of(inner) > layer_of(name):  # type: ignore[operator]
                upward.append(f"{name}:{line} -> {inner}")
    assert not upward, "imports pointing up the layers: " + "; ".join(upward)


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm): modules that import each other
    in a loop, however long."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def module_graph() -> dict[str, set[str]]:
    """Module -> the package's modules it imports, anywhere in its body. A package's ``__init__`` only hands names
    on, so imports of a package are not followed into it (as farm-studio draws a package's face)."""
    files = dict(modules())
    packages = {name for name, path in files.items() if path.name == "__init__.py"}
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        if name in packages:
            continue
        targets = {t[len("mpcommit."):] for t, _ in imports(name, path) if t.startswith("mpcommit.")}
        graph[name] = {t for t in targets if t in files and t not in packages and t != name}
    return graph


def test_no_modules_import_each_other_in_a_circle() -> None:
    assert circles(module_graph()) == []


def test_the_circle_check_can_fail() -> None:
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


#: What an engine binding may import of the protocol: its public names (mpcommit.protocol) and these modules.
ENGINE_MAY_IMPORT = {"mpcommit.protocol", "mpcommit.protocol.job", "mpcommit.protocol.task",
                     "mpcommit.protocol.layout", "mpcommit.protocol.stream", "mpcommit.protocol.faults"}


def reaching_into_the_protocol(found: Iterator[tuple[str, Path]]) -> list[str]:
    return [f"{name}:{line} -> {target}" for name, path in found if name.startswith("spark")
            for target, line in imports(name, path)
            if target.startswith("mpcommit.protocol") and target not in ENGINE_MAY_IMPORT]


def test_the_spark_binding_uses_the_protocol_through_its_public_names() -> None:
    """Issue 37: spark/ imported the protocol's records, commit and order internals; it uses the names
    mpcommit.protocol hands out and the job, task, layout, stream and faults modules (protocol/__init__.py)."""
    assert not reaching_into_the_protocol(modules())


def test_the_public_names_of_the_protocol_resolve() -> None:
    import mpcommit.protocol as protocol

    for name in protocol.__all__:
        assert getattr(protocol, name) is not None
    with pytest.raises(AttributeError):
        protocol.NoSuchName  # noqa: B018


def test_the_engine_boundary_check_can_fail(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("from ..protocol.records.order import Txn\nfrom ..protocol import Txn as T\n")
    assert reaching_into_the_protocol(iter([("spark.m", module)])) == ["spark.m:1 -> mpcommit.protocol.records.order"]


@pytest.mark.parametrize("library", sorted(ONLY_IN))
def test_third_party_libraries_stay_behind_their_boundary(library: str) -> None:
    allowed = ONLY_IN[library]
    outside = [f"{name}:{line}" for name, path in modules()
               for target, line in imports(name, path)
               if target.split(".")[0] == library and not any(name == a or name.startswith(a + ".") for a in allowed)]
    assert not outside, f"{library} imported outside {allowed}: {outside}"


def test_libraries_allowed_nowhere_are_not_dependencies() -> None:
    """A library no module may import (tenacity) is not installed with mpcommit either. (The installed
    distribution's requirements, as pip read them from pyproject.toml: tomllib is Python 3.11's.)"""
    from importlib import metadata

    from packaging.requirements import Requirement

    names = {Requirement(r).name.lower() for r in metadata.requires("mpcommit") or [] if Requirement(r).marker is None}
    unused = sorted(lib for lib, allowed in ONLY_IN.items() if not allowed and lib in names)
    assert not unused, f"dependencies no module may import: {unused}"


def test_the_boundary_checks_can_fail(tmp_path: Path) -> None:
    """The checker sees an upward import inside a function, and a library imported where it must not be."""
    sample = tmp_path / "job.py"
    sample.write_text("def f():\n    from ..catalog.sync import sync\n    import boto3\n")
    found = list(imports("protocol.job", sample))
    assert ("mpcommit.catalog.sync", 2) in found and ("boto3", 3) in found
    assert layer_of("catalog.sync") > layer_of("protocol.job")  # type: ignore[operator]


TESTS = Path(__file__).resolve().parent


def tangled_test_imports(root: Path) -> list[str]:
    """Imports under ``root`` that break the test tree's rules: tests never import bench/ (bench's own tests live
    in bench/tests and may use tests/support, not the other way round), and helpers are imported from
    tests/support, never from a conftest (a conftest holds fixtures and hooks, found by pytest itself)."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            relative_conftest = isinstance(node, ast.ImportFrom) and node.level and node.module == "conftest"
            for target in names:
                if target == "bench" or target.startswith("bench."):
                    found.append(f"{path.relative_to(root)}:{node.lineno} imports {target}")
                if target.split(".")[-1] == "conftest":
                    found.append(f"{path.relative_to(root)}:{node.lineno} imports {target}")
            if relative_conftest:
                found.append(f"{path.relative_to(root)}:{node.lineno} imports .conftest")
    return found


def test_the_test_tree_is_untangled() -> None:
    assert tangled_test_imports(TESTS) == []


def test_the_test_tree_check_can_fail(tmp_path: Path) -> None:
    (tmp_path / "test_a.py").write_text("from bench.s3_network import S3Network\nimport bench\n")
    (tmp_path / "test_b.py").write_text("from tests.cli.conftest import cli\nfrom .conftest import x\n")
    assert tangled_test_imports(tmp_path) == [
        "test_a.py:1 imports bench.s3_network", "test_a.py:2 imports bench",
        "test_b.py:1 imports tests.cli.conftest", "test_b.py:2 imports .conftest"]


#: The top-level module Spark imports to find mpcommit's data source (PySpark's ``pyspark_*`` convention): it names
#: PySpark's classes, which live in mpcommit.spark.pyspark_source, and nothing in the package imports it (an import
#: from the package up to it would be the one edge running against the layers).
ENTRY_MODULE = PACKAGE.parent / "pyspark_mpcommit" / "__init__.py"
ENTRY_MAY_IMPORT = ("mpcommit.spark.pyspark_source",)


def test_the_data_source_entry_module_sits_on_top_of_the_spark_binding() -> None:
    found = [(target, line) for target, line in imports("pyspark_mpcommit", ENTRY_MODULE)]
    assert found, "pyspark_mpcommit imports nothing?"
    outside = [f"{t}:{line}" for t, line in found if t not in ENTRY_MAY_IMPORT]
    assert not outside, f"pyspark_mpcommit imports beyond mpcommit.spark.pyspark_source: {outside}"
    importers = [f"{name}:{line}" for name, path in modules() for target, line in imports(name, path)
                 if target.split(".")[0] == "pyspark_mpcommit"]
    assert not importers, f"nothing in mpcommit may import pyspark_mpcommit (Spark does): {importers}"
    # PySpark's classes load pyspark: only Spark (through the entry module) and register(spark) load them.
    loaders = [f"{name}:{line}" for name, path in modules() for target, line in imports(name, path)
               if target == "mpcommit.spark.pyspark_source" and name != "spark"]
    assert not loaders, f"only mpcommit.spark.register may import pyspark_source: {loaders}"
