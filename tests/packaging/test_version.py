"""The version is written once, in the top-level VERSION file: `make packages` reads it
(packaging/build-packages.sh); the places whose tool cannot read a file outside its own
project (setuptools, maturin, Cargo) or that a running program reads (``__version__``)
repeat it, and this test holds them to it."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
VERSION = (ROOT / "VERSION").read_text(encoding="utf-8").strip()


def _init_version(path: str) -> str:
    text = (ROOT / path).read_text(encoding="utf-8")
    found = re.search(r'^__version__ = "([^"]+)"$', text, re.MULTILINE)
    assert found, f"{path} has no __version__ line"
    return found.group(1)


def _toml(path: str, *keys: str) -> str:
    value: object = tomllib.loads((ROOT / path).read_text(encoding="utf-8"))
    for key in keys:
        assert isinstance(value, dict)
        value = value[key]
    return str(value)


def _cargo_lock(crate: str) -> str:
    lock = tomllib.loads((ROOT / "tools/sim/Cargo.lock").read_text(encoding="utf-8"))
    return next(str(p["version"]) for p in lock["package"] if p["name"] == crate)


@pytest.mark.parametrize("where, read", [
    ("hypervisor/pyproject.toml", lambda: _toml("hypervisor/pyproject.toml", "project", "version")),
    ("guest-agent/pyproject.toml",
     lambda: _toml("guest-agent/pyproject.toml", "project", "version")),
    ("tools/sim/pyproject.toml", lambda: _toml("tools/sim/pyproject.toml", "project", "version")),
    ("tools/sim/Cargo.toml",
     lambda: _toml("tools/sim/Cargo.toml", "workspace", "package", "version")),
    ("tools/sim/Cargo.lock (core)", lambda: _cargo_lock("unicache-sim-core")),
    ("tools/sim/Cargo.lock (py)", lambda: _cargo_lock("unicache-sim-py")),
    ("unicache.__version__", lambda: _init_version("hypervisor/unicache/__init__.py")),
    ("unicache_agent.__version__",
     lambda: _init_version("guest-agent/unicache_agent/__init__.py")),
], ids=lambda v: v if isinstance(v, str) else "")
def test_every_copy_of_the_version_is_the_version_file(where: str, read: object) -> None:
    assert re.fullmatch(r"\d+\.\d+\.\d+", VERSION), f"VERSION is {VERSION!r}"
    assert callable(read)
    assert read() == VERSION, f"{where} says {read()}, VERSION says {VERSION}"
