"""What the shim cannot see, shown (docs/agent.md "What the shim cannot see").

An LD_PRELOAD library sees only calls made through the dynamic libc: a static binary and a
Go program (its runtime makes its own system calls) never load it, io_uring's reads and an
mmap's loads are no calls at all, and glibc's stdio reads through its internal read. Each
reads a placed file under the shim here and the counters stay empty of it, while the same
file read with read(2) by a dynamic program, the control, is counted: so the test would
see it if any of them were.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from unicache_agent.shm import BUDGET_UNLIMITED, ShmEntry

from tests.shim.shimtools import CHUNK, ShimEnv

SOURCES = Path(__file__).with_name("unseen")
FILE_BYTES = 1 << 20


def _build_c(src: str, out: Path, *flags: str) -> Path:
    subprocess.run(["gcc", "-O2", "-Wall", "-Werror", *flags, "-o", str(out),
                    str(SOURCES / src)], check=True)
    return out


def _build_go(out: Path, tmp: Path) -> Path:
    go = shutil.which("go") or "/usr/local/go/bin/go"
    if not Path(go).exists():
        pytest.fail("Go is needed for this test as for `make packages` (Go >= 1.25: go.dev/dl)")
    env = {**os.environ, "GOCACHE": str(tmp / "gocache"), "GOPATH": str(tmp / "gopath"),
           "CGO_ENABLED": "0", "GOFLAGS": "-mod=mod"}
    subprocess.run([go, "build", "-o", str(out), str(SOURCES / "go_reader.go")], check=True,
                   env=env, cwd=tmp)
    return out


@pytest.fixture(scope="module")
def readers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("unseen")
    return {
        "read(2), dynamic (the control)": _build_c("read_reader.c", tmp / "read"),
        "static binary": _build_c("read_reader.c", tmp / "static", "-static"),
        "Go": _build_go(tmp / "go", tmp),
        "io_uring": _build_c("uring_reader.c", tmp / "uring"),
        "mmap": _build_c("mmap_reader.c", tmp / "mmap"),
        "stdio fread": _build_c("stdio_reader.c", tmp / "stdio"),
    }


#: kind -> (reader, extra arguments)
KINDS = {"read(2), dynamic (the control)": ("read(2), dynamic (the control)", ()),
         "static binary": ("static binary", ()), "Go": ("Go", ()),
         "io_uring": ("io_uring", ()), "mmap": ("mmap", ()),
         "stdio fread": ("stdio fread", ()),
         "read(2) on a stream's fileno": ("stdio fread", ("fileno",))}


def _placed_file(shim_env: ShimEnv, tmp_path: Path) -> tuple[Path, bytes, int]:
    """A file of random bytes, every chunk of it placed on every CPU, the counters empty:
    the file, its bytes and its id."""
    f = tmp_path / "data"
    data = os.urandom(FILE_BYTES)
    f.write_bytes(data)
    fid = shim_env.file_id(f)
    every = frozenset(os.sched_getaffinity(0))
    shim_env.table.publish(1, CHUNK, 4096, [
        ShmEntry(fid, i, every, migration_budget=BUDGET_UNLIMITED)
        for i in range(FILE_BYTES // CHUNK)])
    shim_env.counters.harvest(0)
    return f, data, fid


@pytest.mark.parametrize("kind", list(KINDS))
def test_what_the_shim_cannot_see_is_not_counted(shim_env: ShimEnv, tmp_path: Path,
                                                 readers: dict[str, Path], kind: str) -> None:
    f, data, fid = _placed_file(shim_env, tmp_path)
    reader, extra = KINDS[kind]
    out = subprocess.run([str(readers[reader]), str(f), *extra], env=shim_env.env,
                         capture_output=True, text=True, check=True)
    assert int(out.stdout) == sum(data)  # it read the file whole
    counted = sum(c.bytes_read for c in shim_env.counters.harvest(0).chunks if c.file_id == fid)
    if kind.endswith("(the control)"):
        assert counted == FILE_BYTES
    else:
        assert counted == 0


@pytest.mark.parametrize("when", ["open", "fcntl"])
def test_a_descriptor_with_o_direct_is_not_counted(shim_env: ShimEnv, tmp_path: Path,
                                                    readers: dict[str, Path], when: str) -> None:
    """O_DIRECT reads bypass the page cache unicache places: the descriptor passes, whether
    the flag came with the open (read from open's flags, no fcntl asked) or later from
    fcntl(F_SETFL). The same reader without the flag is counted (the control above)."""
    f, data, fid = _placed_file(shim_env, tmp_path)
    out = subprocess.run([str(readers["read(2), dynamic (the control)"]), str(f), when],
                         env=shim_env.env, capture_output=True, text=True)
    assert out.returncode == 0, f"the reader failed ({out.returncode}): O_DIRECT on {tmp_path}?"
    assert int(out.stdout) == sum(data)
    counted = sum(c.bytes_read for c in shim_env.counters.harvest(0).chunks if c.file_id == fid)
    assert counted == 0
