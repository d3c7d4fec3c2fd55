"""Helpers of the package tests: build the packages, run commands in a root directory,
and take the inventory of a root's files to compare before and after."""

from __future__ import annotations

import hashlib
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VERSION = (ROOT / "VERSION").read_text(encoding="utf-8").strip()
#: what dpkg and rpm keep about packages (their databases and logs): not the system's files
BOOKKEEPING = ("var/lib/dpkg", "var/log", "var/lib/rpm", "var/cache", "usr/lib/sysimage/rpm",
               "root/.rpmdb", "tmp")


@dataclass(frozen=True)
class Packages:
    """The artefacts of `make packages`."""

    agent_deb: Path
    agent_rpm: Path
    host_deb: Path
    wheel: Path


def build_packages(out: Path = ROOT / "build/packages") -> Packages:
    """Run `make packages` and find what it built."""
    done = subprocess.run(["make", "--no-print-directory", "packages"], cwd=ROOT,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return Packages(out / f"unicache-agent_{VERSION}-1_amd64.deb",
                    out / f"unicache-agent-{VERSION}-1.x86_64.rpm",
                    out / f"unicache_{VERSION}-1_amd64.deb",
                    out / f"unicache-{VERSION}-py3-none-any.whl")


def build_agent_packages(out: Path, shim: Path) -> Packages:
    """Build the agent's packages with ``shim`` as its libunicache.so (the rest as usual)."""
    env = {**os.environ, "UC_SHIM": str(shim)}
    subprocess.run(["bash", str(ROOT / "packaging/build-packages.sh"), "agent", str(out)],
                   cwd=ROOT, env=env, check=True, capture_output=True)
    missing = out / "none"
    return Packages(out / f"unicache-agent_{VERSION}-1_amd64.deb",
                    out / f"unicache-agent-{VERSION}-1.x86_64.rpm", missing, missing)


def in_root(root: Path, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run a command chrooted into ``root`` (PATH of a Debian root shell)."""
    env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
           "LANG": "C.UTF-8", "HOME": "/root", "DEBIAN_FRONTEND": "noninteractive"}
    done = subprocess.run(["chroot", str(root), *argv], env=env, capture_output=True,
                          text=True)
    if check:
        assert done.returncode == 0, f"{argv}: exit {done.returncode}\n{done.stdout}{done.stderr}"
    return done


def copy_in(root: Path, package: Path) -> str:
    """Copy a package into the root's /tmp; its path inside the root."""
    (root / "tmp" / package.name).write_bytes(package.read_bytes())
    return f"/tmp/{package.name}"


def inventory(root: Path) -> dict[str, str]:
    """Every path under ``root`` (but the package managers' bookkeeping) -> its kind and,
    for a regular file, its mode and content hash; for a link, its target."""
    found: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        dirnames[:] = [d for d in dirnames
                       if os.path.normpath(os.path.join(rel_dir, d)) not in BOOKKEEPING]
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            rel = os.path.normpath(os.path.join(rel_dir, name))
            if path.is_symlink():
                found[rel] = f"link {os.readlink(path)}"
            elif path.is_dir():
                found[rel] = "dir"
            elif path.is_file():
                digest = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
                found[rel] = f"file {path.stat().st_mode:o} {digest}"
            else:  # device nodes (/dev/zero), fifos, sockets: never read
                found[rel] = f"special {path.lstat().st_mode:o}"
    return found


def differences(before: dict[str, str], after: dict[str, str]) -> list[str]:
    """What changed between two inventories, one line each (empty: nothing)."""
    lines = [f"new {p}" for p in sorted(after.keys() - before.keys())]
    lines += [f"gone {p}" for p in sorted(before.keys() - after.keys())]
    lines += [f"changed {p}: {before[p]} -> {after[p]}"
              for p in sorted(before.keys() & after.keys()) if before[p] != after[p]]
    return lines
