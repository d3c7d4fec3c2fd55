"""Fixtures of the package tests: the packages `make packages` builds, a clean Debian 12
root (a copy of the debootstrap layer the guest image is built from) and a clean Debian 13
root (debootstrap trixie, cached beside it) to install them into."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from unicache.host.qemu import ensure_image

from tests.packaging.chroot import ROOT, Packages, build_packages

#: Debian 13's base for the package tests: what the agent's package needs and nothing else
TRIXIE_PACKAGES = "python3"


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


def _trixie_base() -> Path:
    """debootstrap trixie (minbase + python3), cached under the image cache by mirror and
    packages, built once under the cache's lock (the image build takes the same one)."""
    cache = Path(os.environ.get("UNICACHE_IMAGE_CACHE", ROOT / "build/images/cache"))
    mirror = os.environ.get("UNICACHE_DEBIAN_MIRROR", "http://deb.debian.org/debian")
    key = hashlib.sha256(f"v1 trixie {mirror} {TRIXIE_PACKAGES}".encode()).hexdigest()[:12]
    base = cache / f"base-trixie-{key}"
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (base / ".complete").is_file():
            shutil.rmtree(base, ignore_errors=True)
            tmp = base.with_name(base.name + ".tmp")
            shutil.rmtree(tmp, ignore_errors=True)
            done = subprocess.run(
                ["debootstrap", "--variant=minbase", f"--include={TRIXIE_PACKAGES}", "trixie",
                 str(tmp), mirror], capture_output=True, text=True)
            assert done.returncode == 0, (
                f"debootstrap trixie from {mirror} failed: {done.stdout[-2000:]}"
                f"{done.stderr[-2000:]}")
            (tmp / ".complete").touch()
            tmp.rename(base)
    return base


@pytest.fixture
def clean_trixie_root(tmp_path: Path) -> Iterator[Path]:
    """A fresh copy of a Debian 13 base for one test (removed after it)."""
    root = tmp_path / "trixie"
    subprocess.run(["cp", "-a", str(_trixie_base()), str(root)], check=True)
    (root / ".complete").unlink()
    yield root
    shutil.rmtree(root, ignore_errors=True)
