"""The counters' slots (uc_layout.h, uc_counters.c uc_slot_at): taken in order, found by an
index, bounded.

A program that reads many small files writes its counts side by side, so it writes a few
pages of counters rather than one page per file; an index a user's own process wrote over
misleads no read; a full region drops what does not fit and says so.
"""

from __future__ import annotations

import os
import struct
import subprocess
from pathlib import Path

import pytest
from unicache_agent.shm import CounterLayout

from tests.shim.shimtools import ShimEnv, build_files_reader

FILES = 100
FILE_BYTES = 3000



@pytest.fixture(scope="module")
def reader(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_files_reader(tmp_path_factory.mktemp("reader"))


def _small_files(d: Path, n: int) -> list[Path]:
    out = []
    for i in range(n):
        p = d / f"s{i:03d}"
        p.write_bytes(os.urandom(FILE_BYTES))
        out.append(p)
    return out


def _region(shim_env: ShimEnv) -> tuple[CounterLayout, bytes, int]:
    """This user's active region as the shims left it, its layout and where it starts."""
    lay = shim_env.counters.layout
    data = Path(shim_env.counters.user_path()).read_bytes()
    active = struct.unpack_from("<I", data, 16)[0] & 1
    base = lay.region_offset(active)
    return lay, data[base:base + lay.region_len], base


def _slot_numbers(lay: CounterLayout, region: bytes) -> dict[int, int]:
    """file id -> the number of its chunk 0's slot, for every slot with a key."""
    out = {}
    for n in range(lay.nslots):
        key, fid, chunk = struct.unpack_from("<3Q", region, lay.slots_offset + n * lay.slot_size)
        if key and chunk == 0:
            out[fid] = n
    return out


def test_one_process_takes_its_new_chunks_slots_side_by_side(
        shim_env: ShimEnv, tmp_path: Path, reader: Path) -> None:
    files = _small_files(tmp_path, FILES)
    shim_env.table.publish(1, 65536, 4096, [])  # a valid table that places nothing
    shim_env.counters.harvest(0)
    out = subprocess.run([str(reader), *map(str, files)], env=shim_env.env,
                         capture_output=True, text=True, check=True)
    assert int(out.stdout) == FILES * FILE_BYTES
    lay, region, _ = _region(shim_env)
    taken = struct.unpack_from("<Q", region, 0)[0]
    numbers = _slot_numbers(lay, region)
    ours = [numbers.get(shim_env.file_id(f)) for f in files]
    assert None not in ours, "a file read was not counted"
    # in the order read, one after another: 100 files' counts in 100 x 128 B, 4 pages,
    # where slots placed by a hash of the file would spread over the region's 256 pages
    assert ours == list(range(ours[0], ours[0] + FILES))
    assert taken == len(numbers)
    harvest = shim_env.counters.harvest(0)
    counted = {c.file_id: c.bytes_read for c in harvest.chunks}
    assert [counted.get(shim_env.file_id(f)) for f in files] == [FILE_BYTES] * FILES
    assert harvest.dropped == 0


def test_an_index_written_over_misleads_no_count(shim_env: ShimEnv, tmp_path: Path,
                                                 reader: Path) -> None:
    """A user may write anything into their own counters file: index entries that name
    no slot, or a slot of another chunk, are passed over; the read is still counted, in a
    slot of its own, and nothing is written outside the region."""
    files = _small_files(tmp_path, 8)
    shim_env.table.publish(1, 65536, 4096, [])
    path = Path(shim_env.user_counters())
    shim_env.counters.harvest(0)
    lay, _, base = _region(shim_env)
    nidx = 2 * lay.nslots
    junk = [0xFFFFFFFF, lay.nslots + 1, lay.nslots, 1, 2, 3] * (nidx // 6) + [7] * (nidx % 6)
    with open(path, "r+b") as f:
        f.seek(base + 64)
        f.write(struct.pack(f"<{nidx}I", *junk))  # every entry taken, none of them ours
        f.seek(base)
        f.write(struct.pack("<Q", 3))  # slots 0-2 "taken": keyless, they hold no chunk
    before = path.read_bytes()
    out = subprocess.run([str(reader), *map(str, files)], env=shim_env.env,
                         capture_output=True, text=True, check=True)
    assert int(out.stdout) == 8 * FILE_BYTES
    after = path.read_bytes()
    # the claims, the index, the slots held and the other region are as they were (no
    # index entry was free to enter; the slots taken went back keyless)
    lo, hi = base + lay.slots_offset + 3 * lay.slot_size, base + lay.region_len
    assert after[64:base] == before[64:base]
    assert after[base + 8:lo] == before[base + 8:lo]
    assert after[hi:] == before[hi:]
    harvest = shim_env.counters.harvest(0)
    # with no free index entry a chunk's slot cannot be found again: each read is dropped
    # and said, never added to another chunk's counts
    assert not {c.file_id for c in harvest.chunks} & {shim_env.file_id(f) for f in files}
    assert harvest.dropped >= 8


def test_a_full_region_drops_what_does_not_fit_and_says_so(
        shim_env: ShimEnv, tmp_path: Path, reader: Path) -> None:
    shim_env.relayout(nslots=16)
    files = _small_files(tmp_path, 40)
    shim_env.table.publish(1, 65536, 4096, [])
    shim_env.counters.harvest(0)
    subprocess.run([str(reader), *map(str, files)], env=shim_env.env, capture_output=True,
                   text=True, check=True)
    lay, region, _ = _region(shim_env)
    assert struct.unpack_from("<Q", region, 0)[0] >= lay.nslots  # taken past the end
    harvest = shim_env.counters.harvest(0)
    ids = [shim_env.file_id(f) for f in files]
    counted = [c.file_id for c in harvest.chunks if c.file_id in ids]
    assert len(counted) == lay.nslots == 16
    assert sorted(counted, key=ids.index) == ids[:len(counted)]  # the first ones read
    assert harvest.dropped == 40 - len(counted)
