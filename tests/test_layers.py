"""The package's shape (README "Architecture"): public import paths, the root, no import cycles.

The layer contract itself is ``lint-imports`` (``[tool.importlinter]`` in pyproject.toml,
run by ``.ci/run``); these tests keep what it cannot see: the documented import paths still
import, the root holds only the public surface, and no two modules import each other
through any chain (``TYPE_CHECKING`` imports and imports inside functions included).
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

import langgraph_memory_plus

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = Path(langgraph_memory_plus.__file__).parent


def test_every_import_the_readme_shows_works() -> None:
    readme = (ROOT / "README.md").read_text()
    found = re.findall(r"^from (langgraph_memory_plus[\w.]*) import ([\w, ]+)", readme, re.M)
    assert len(found) > 10
    for module, names in found:
        imported = importlib.import_module(module)
        for name in (n.strip() for n in names.split(",")):
            assert hasattr(imported, name), f"{module}.{name}"


def test_the_root_holds_only_the_public_surface() -> None:
    modules = {p.stem for p in PACKAGE.glob("*.py")}
    assert modules == {"__init__", "erasure", "errors", "migration", "server", "url"}
    folders = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    assert folders == {
        "approvals",
        "checkpoint",
        "cli",
        "drivers",
        "encryption",
        "messages",
        "nodes",
        "observability",
        "privacy",
        "store",
        "threads",
        "transfer",
    }


def test_the_public_root_modules_are_the_layers_objects() -> None:
    from langgraph_memory_plus import erasure, migration
    from langgraph_memory_plus.privacy import erasure as privacy_erasure
    from langgraph_memory_plus.transfer import migration as transfer_migration

    for public, home in ((erasure, privacy_erasure), (migration, transfer_migration)):
        assert public.__all__
        for name in public.__all__:
            assert getattr(public, name) is getattr(home, name), name


def test_no_import_cycles() -> None:
    grimp = pytest.importorskip("grimp")  # installed with import-linter (the dev extra)
    graph = grimp.build_graph("langgraph_memory_plus", cache_dir=None)
    cycles = [
        (a, b)
        for a in graph.modules
        for b in graph.find_modules_directly_imported_by(a)
        if graph.chain_exists(importer=b, imported=a)
    ]
    assert cycles == []
