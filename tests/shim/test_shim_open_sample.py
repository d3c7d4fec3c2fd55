"""The table's open sample (uc_fdcache.c uc_fd_sample): which opens of small files the
shim counts, and how their counts are scaled.

A read-only open of a regular file of at most ``sample_bytes`` is counted with probability
2^-``sample_shift`` and its counts go out multiplied by 2^``sample_shift``; the other such
opens pass every call straight through. A file the table names, a larger file, and a file
opened for writing are counted whole at every open. The draws are random per open, so the
counted share is checked against binomial bounds far from what a correct rule gives
(more than five standard deviations).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from unicache_agent.shm import OpenSample, ShmEntry

from tests.shim.shimtools import ShimEnv, build_files_reader

CHUNK = 65536
SMALL = 2000
SHIFT = 2
SAMPLE = OpenSample(64 * 1024, SHIFT)

# opens each file with the flags named, fstats it (as programs do), reads it whole in 4 KiB
# calls through os.read (the shim's read), closes it; prints the bytes read
PY_READER = r"""
import os, sys
flags = os.O_RDWR if sys.argv[1] == "rdwr" else os.O_RDONLY
total = 0
for path in sys.argv[2:]:
    fd = os.open(path, flags)
    os.fstat(fd)
    while chunk := os.read(fd, 4096):
        total += len(chunk)
    os.close(fd)
print(total)
"""


@pytest.fixture(scope="module")
def reader(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_files_reader(tmp_path_factory.mktemp("sample"))


def _files(d: Path, count: int, size: int) -> list[Path]:
    out = []
    for i in range(count):
        p = d / f"f{i:03d}"
        p.write_bytes(bytes([i % 251]) * size)
        out.append(p)
    return out


def _sampled(env: ShimEnv, entries: list[ShmEntry] | None = None) -> None:
    env.table.sample = SAMPLE
    env.table.publish(1, CHUNK, 4096, entries or [])


def _counted(env: ShimEnv, files: list[Path]) -> dict[Path, tuple[int, int]]:
    """(bytes, reads) the harvest holds for each of files it counted."""
    by_id = {c.file_id: (c.bytes_read, c.reads) for c in env.counters.harvest(0).chunks}
    return {f: by_id[env.file_id(f)] for f in files if env.file_id(f) in by_id}


def _read(env: ShimEnv, reader: Path, files: list[Path]) -> None:
    out = subprocess.run([str(reader), "--stat", *map(str, files)], env=env.env,
                         capture_output=True, text=True, check=True)
    assert int(out.stdout) == sum(f.stat().st_size for f in files)


def _py_read(env: ShimEnv, mode: str, files: list[Path]) -> None:
    out = subprocess.run([sys.executable, "-c", PY_READER, mode, *map(str, files)],
                         env=env.env, capture_output=True, text=True, check=True)
    assert int(out.stdout) == sum(f.stat().st_size for f in files)


def test_one_small_read_only_open_in_2_to_the_shift_is_counted_and_scaled_up(
        shim_env: ShimEnv, tmp_path: Path, reader: Path) -> None:
    files = _files(tmp_path, 240, SMALL)
    _sampled(shim_env)
    _read(shim_env, reader, files)
    counted = _counted(shim_env, files)
    # 240 opens at 1/4: 60 expected, standard deviation 6.7
    assert 25 <= len(counted) <= 95, len(counted)
    # each counted open stands for four: its one run of 2,000 bytes goes out as four
    assert set(counted.values()) == {(SMALL << SHIFT, 1 << SHIFT)}


def test_every_open_of_a_small_file_the_table_names_is_counted_whole(
        shim_env: ShimEnv, tmp_path: Path, reader: Path) -> None:
    named, other = _files(tmp_path, 2, SMALL)
    fid = shim_env.file_id(named)
    _sampled(shim_env, [ShmEntry(fid, 0, frozenset())])
    _read(shim_env, reader, [named, other] * 40)
    counted = _counted(shim_env, [named, other])
    assert counted[named] == (40 * SMALL, 40)
    # the other file's opens are sampled: some counted at four each, or none at all
    assert counted.get(other, (0, 0))[1] % (1 << SHIFT) == 0


def test_files_larger_than_the_sample_are_counted_whole(
        shim_env: ShimEnv, tmp_path: Path, reader: Path) -> None:
    large = _files(tmp_path, 1, 64 * 1024 + 1)[0]
    _sampled(shim_env)
    _read(shim_env, reader, [large] * 20)
    by_chunk = {(c.file_id, c.chunk): c.bytes_read for c in shim_env.counters.harvest(0).chunks}
    fid = shim_env.file_id(large)
    assert (by_chunk[fid, 0], by_chunk[fid, 1]) == (20 * CHUNK, 20 * 1)


def test_a_file_opened_for_writing_is_counted_whole_and_read_only_opens_are_sampled(
        shim_env: ShimEnv, tmp_path: Path) -> None:
    files = _files(tmp_path, 120, SMALL)
    _sampled(shim_env)
    _py_read(shim_env, "rdwr", files)
    assert _counted(shim_env, files) == {f: (SMALL, 1) for f in files}
    _py_read(shim_env, "rdonly", files)
    counted = _counted(shim_env, files)
    assert 8 <= len(counted) <= 55, len(counted)  # 30 expected, deviation 4.7
    assert set(counted.values()) == {(SMALL << SHIFT, 1 << SHIFT)}


def test_without_a_sample_every_small_open_is_counted_whole(
        shim_env: ShimEnv, tmp_path: Path, reader: Path) -> None:
    files = _files(tmp_path, 60, SMALL)
    shim_env.table.publish(1, CHUNK, 4096, [])  # the writer's default: EVERY_OPEN
    _read(shim_env, reader, files)
    assert _counted(shim_env, files) == {f: (SMALL, 1) for f in files}
