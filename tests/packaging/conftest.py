"""Fixtures of the package tests: the packages `make packages` builds, and a clean Debian 12
root (a copy of the debootstrap layer the guest image is built from) to install them into."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from unicache.host.qemu import ensure_image

from tests.packaging.chroot import Packages, build_packages


@pytest.fixture(scope="session")
def packages() -> Packages:
    """`make packages` (make skips it when nothing changed)."""
    return build_packages()


@pytest.fixture(scope="session")
def base_rootfs() -> Path:
    """The cached debootstrap rootfs of the guest image (``make image`` builds it)."""
    image = ensure_image()
    meta = json.loads((image.directory / "image.json").read_text(encoding="utf-8"))
    base = Path(meta["base_rootfs"])
    assert (base / ".complete").is_file(), f"no debootstrap layer at {base}"
    return base


@pytest.fixture
def clean_root(base_rootfs: Path, tmp_path: Path) -> Iterator[Path]:
    """A fresh copy of the Debian 12 base for one test (removed after it)."""
    root = tmp_path / "root"
    subprocess.run(["cp", "-a", str(base_rootfs), str(root)], check=True)
    (root / ".complete").unlink()
    yield root
    shutil.rmtree(root, ignore_errors=True)
