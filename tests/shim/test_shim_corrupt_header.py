"""A corrupted header never faults a process under the shim (issue #12).

A corrupted table header turns the shim off in that process with one line on stderr
(``libunicache[pid]: ... running as the plain calls``, uc_map.c ``uc_warn``), however many
reads follow and however often the shim retries the mapping (once a second): each reader
here reads with 4 threads for longer than two retries. Its reads still return the file's
bytes. A header corrupted before the process starts is refused when it maps the table; one
corrupted while it runs is seen at the next lookup (its magic), and the remap refuses it.

A counters header corrupted by its own user (no other user can write it: per-user files,
test_shim_users.py) is a counters file of another layout to the shim: it retires the file
and makes a whole new one, as it does after the agent restarts with other settings; that
takes no line.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from unicache_agent.shm import ShmEntry

from tests.shim.shimtools import CHUNK, ShimEnv, cpus

#: seconds each reader reads after the corruption: more than two of the shim's retries (1 s)
READ_S = 2.5
#: the shim's line when it turns itself off (uc_map.c uc_warn)
WARNING = re.compile(r"libunicache\[(\d+)\]: (bad table header in|short table file) "
                     r"(\S+), running as the plain calls")

#: A process under the shim: one pass over the file, "mapped N" (uc_active), then on "go"
#: 4 threads preading the file in 4 KiB..64 KiB pieces for READ_S seconds; prints the
#: passes, the passes whose bytes differ from the file's sha256, and uc_active at the end.
READER = r"""
import ctypes, hashlib, json, os, random, sys, threading, time

path, digest, secs = sys.argv[1], sys.argv[2], float(sys.argv[3])
shim = ctypes.CDLL(None)
fd = os.open(path, os.O_RDONLY)
size = os.fstat(fd).st_size


def one_pass(rng):
    h, off = hashlib.sha256(), 0
    while off < size:
        piece = os.pread(fd, rng.choice((4096, 16384, 65536)), off)
        h.update(piece)
        off += len(piece)
    return h.hexdigest() == digest


totals = {"passes": 0, "bad": 0, "reads_before": 1 - one_pass(random.Random(0))}
print(f"mapped {shim.uc_active()}", flush=True)
sys.stdin.readline()


def run(seed):
    rng, end = random.Random(seed), time.monotonic() + secs
    while time.monotonic() < end:
        ok = one_pass(rng)
        totals["passes"] += 1
        totals["bad"] += not ok


threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
totals["mapped"] = shim.uc_active()
print(json.dumps(totals), flush=True)
"""

_U32 = struct.Struct("<I")
_RANDOM_HEADER = random.Random(12).randbytes(64)

#: header corruptions: (offset, bytes) written over the table header (uc_layout.h
#: uc_table_hdr: magic 0, layout 4, nbuckets 16, ctr_nslots 40, ctr_max_vcpus 44)
CORRUPTIONS = {
    "magic": (0, b"XXXX"),
    "layout-version": (4, _U32.pack(99)),
    "nbuckets-zero": (16, _U32.pack(0)),
    "nbuckets-not-a-power-of-two": (16, _U32.pack(4095)),
    "nbuckets-over-the-bound": (16, _U32.pack(1 << 31)),
    "nbuckets-past-the-file": (16, _U32.pack(65536)),
    "counter-slots-not-a-power-of-two": (40, _U32.pack(0xffffffff)),
    "counter-vcpus-over-the-bound": (44, _U32.pack(100000)),
    "random-bytes": (0, _RANDOM_HEADER),
}


def _publish(shim_env: ShimEnv, data: Path) -> None:
    fid = shim_env.file_id(data)
    shim_env.table.publish(1, CHUNK, 4096, [
        ShmEntry(fid, i, frozenset(cpus()), replica_nodes=frozenset({0}))
        for i in range(data.stat().st_size // CHUNK + 1)])


def _read_with(shim_env: ShimEnv, data: Path, corrupt: tuple[int, bytes],
               while_running: bool) -> tuple[dict[str, int], int, list[str], int]:
    """Runs READER over data; corrupts the table header before it starts or once it has
    mapped the table. Returns its totals, "mapped" before the corruption, its stderr lines
    and its pid."""
    table = Path(shim_env.table.path)
    off, raw = corrupt

    def damage() -> None:
        fd = os.open(table, os.O_WRONLY)
        try:
            assert os.pwrite(fd, raw, off) == len(raw)
        finally:
            os.close(fd)

    if not while_running:
        damage()
    digest = hashlib.sha256(data.read_bytes()).hexdigest()
    proc = subprocess.Popen([sys.executable, "-c", READER, str(data), digest, str(READ_S)],
                            env=shim_env.env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stdin is not None and proc.stdout is not None
    first = proc.stdout.readline().split()
    if while_running:
        damage()
    out, err = proc.communicate("go\n", timeout=READ_S + 60)
    assert proc.returncode == 0, (proc.returncode, err)  # never a fault (-SIGSEGV, -SIGBUS)
    assert first[0] == "mapped", (first, err)
    return json.loads(out), int(first[1]), err.splitlines(), proc.pid


#: a running shim sizes its mapping from its own copy of the header, checked when it mapped
#: the table: while it runs, only a changed magic is seen (and then the remap is refused)
CASES = [pytest.param(name, False, id=f"{name}-before-start") for name in CORRUPTIONS] + [
    pytest.param(name, True, id=f"{name}-while-running")
    for name, (off, _raw) in CORRUPTIONS.items() if off == 0]


@pytest.mark.parametrize(("name", "while_running"), CASES)
def test_a_corrupted_table_header_turns_the_shim_off_with_one_line_and_no_fault(
        shim_env: ShimEnv, tmp_path: Path, name: str, while_running: bool) -> None:
    data = tmp_path / "data"
    data.write_bytes(random.Random(name).randbytes(3 * CHUNK + 1234))
    _publish(shim_env, data)
    totals, mapped_before, lines, pid = _read_with(shim_env, data, CORRUPTIONS[name],
                                                   while_running)
    assert mapped_before == (1 if while_running else 0)
    # every read returned the file's bytes, many times over, and the shim is off
    assert totals["reads_before"] == 0 and totals["bad"] == 0, totals
    assert totals["passes"] >= 20, totals
    assert totals["mapped"] == 0, totals
    # one line, naming the process and the table, whatever the reads and retries
    assert len(lines) == 1, lines
    m = WARNING.fullmatch(lines[0])
    assert m is not None, lines
    assert (int(m[1]), m[3]) == (pid, shim_env.table.path)


def test_a_counters_header_corrupted_by_its_user_is_replaced_without_a_fault(
        shim_env: ShimEnv, tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.write_bytes(random.Random(7).randbytes(3 * CHUNK + 1234))
    _publish(shim_env, data)
    mine = shim_env.user_counters()
    good = mine.read_bytes()[:4]
    fd = os.open(mine, os.O_WRONLY)
    try:
        os.pwrite(fd, _RANDOM_HEADER, 0)
    finally:
        os.close(fd)
    digest = hashlib.sha256(data.read_bytes()).hexdigest()
    res = subprocess.run([sys.executable, "-c", READER, str(data), digest, str(READ_S)],
                         env=shim_env.env, input="go\n", capture_output=True, text=True,
                         timeout=READ_S + 60, check=False)
    assert res.returncode == 0, (res.returncode, res.stderr)
    first, last = res.stdout.splitlines()
    totals = json.loads(last)
    assert first == "mapped 1" and totals["mapped"] == 1, res.stdout
    assert totals["reads_before"] == 0 and totals["bad"] == 0 and totals["passes"] >= 20
    assert res.stderr == ""
    # a whole file of the table's layout again, counting this process's reads
    assert mine.read_bytes()[:4] == good
    assert sum(c.bytes_read for c in shim_env.counters.harvest(0).chunks) >= \
        totals["passes"] * data.stat().st_size
