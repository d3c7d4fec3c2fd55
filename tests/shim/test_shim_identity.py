"""The shim never changes what a read returns: bytes, return value, errno and file offset."""

from __future__ import annotations

import os
import random
import subprocess
from pathlib import Path

import pytest
from unicache_agent.counters import CounterHarvester
from unicache_agent.shm import (
    BUDGET_UNLIMITED,
    CounterLayout,
    ShmEntry,
    file_id_of,
)
from unicache_agent.table_writer import TableWriter

from tests.shim.shimtools import CHUNK, Reader, ShimEnv, cpus, make_files


def _table_for(env: ShimEnv, files: list[Path], seed: int, budget: int) -> None:
    """Every chunk of every file placed: home vCPUs random, one chunk in three non-caching."""
    rng = random.Random(seed)
    avail = cpus()
    entries = []
    for f in files:
        fid = env.file_id(f)
        for idx in range(f.stat().st_size // CHUNK + 1):
            home = frozenset(rng.sample(avail, rng.randint(1, len(avail))))
            entries.append(ShmEntry(fid, idx, home, caching=rng.randrange(3) != 0,
                                    migration_budget=budget))
    env.table.publish(1, CHUNK, 4096, entries)


def _check(env: ShimEnv, files: list[Path], seed: int, iters: int,
           extra: dict[str, str] | None = None) -> str:
    res = env.run("check", str(seed), str(iters), *map(str, files), extra=extra)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "mismatches=0" in res.stdout
    return str(res.stdout)


def test_plain_call_without_agent_table(shim_env: ShimEnv, tmp_path: Path) -> None:
    files = make_files(tmp_path, 1)
    _check(shim_env, files, 11, 1500, {"UNICACHE_TABLE": str(tmp_path / "absent")})


@pytest.mark.parametrize("seed", [2, 3, 4], ids=["seed2", "seed3", "seed4"])
def test_random_reads_identical_with_table(shim_env: ShimEnv, tmp_path: Path, seed: int) -> None:
    files = make_files(tmp_path, seed)
    _table_for(shim_env, files, seed, BUDGET_UNLIMITED)
    _check(shim_env, files, seed, 2500)
    harvest = shim_env.counters.harvest(0)
    # the shim really ran its paths: it counted, migrated and used the non-temporal copy
    assert sum(c.bytes_read for c in harvest.chunks) > 0
    assert sum(c.nt_reads for c in harvest.chunks) > 0
    if len(cpus()) > 1:
        assert sum(c.migrations for c in harvest.chunks) > 0


def test_nt_read_opt_in_identical(shim_env: ShimEnv, tmp_path: Path) -> None:
    files = make_files(tmp_path, 5)
    _table_for(shim_env, files, 5, 0)
    _check(shim_env, files, 5, 2500, {"UNICACHE_NT_READ": "1"})
    assert sum(c.nt_reads for c in shim_env.counters.harvest(0).chunks) > 0


def test_cat_output_identical_and_counted(shim_env: ShimEnv, tmp_path: Path) -> None:
    f = make_files(tmp_path, 6)[-1]
    _table_for(shim_env, [f], 6, BUDGET_UNLIMITED)
    out = subprocess.run(["cat", str(f)], env=shim_env.env, capture_output=True, check=True)
    assert out.stdout == f.read_bytes()
    harvest = shim_env.counters.harvest(0)
    fid = shim_env.file_id(f)
    assert sum(c.bytes_read for c in harvest.chunks if c.file_id == fid) == f.stat().st_size


def test_a_chunk_read_in_small_buffers_counts_one_read_per_run(shim_env: ShimEnv,
                                                                tmp_path: Path) -> None:
    # uc_count: a read continuing the thread's previous one inside the chunk is the same run
    f = tmp_path / "data"
    f.write_bytes(bytes(range(256)) * 1024)
    fid = shim_env.file_id(f)
    shim_env.table.publish(1, CHUNK, CHUNK, [])
    with Reader(shim_env, f) as r:
        for off in range(0, 2 * CHUNK, 4096):  # chunks 0 and 1 in 4 KiB buffers: two runs
            assert len(r.pread(off, 4096)) == 4096
        assert len(r.pread(CHUNK + 8192, 4096)) == 4096  # a jump back: a third run
        assert len(r.pread(CHUNK + 12288, 4096)) == 4096  # continuing it
    reads = {c.chunk: (c.reads, c.bytes_read) for c in shim_env.counters.harvest(0).chunks
             if c.file_id == fid}
    assert reads == {0: (1, CHUNK), 1: (2, CHUNK + 8192)}


def test_file_ids_agree_between_shim_and_agent(shim_env: ShimEnv) -> None:
    import ctypes

    lib = ctypes.CDLL(str(shim_env.selftest.parent / "libunicache.so"))
    lib.uc_file_id.restype = ctypes.c_uint64
    lib.uc_file_id.argtypes = [ctypes.c_uint64] * 3
    rng = random.Random(7)
    for _ in range(200):
        salt, dev, ino = (rng.getrandbits(64) for _ in range(3))
        assert lib.uc_file_id(salt, dev, ino) == file_id_of(salt, dev, ino)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run a reader as another user")
def test_processes_of_other_users_are_counted(shim_build: Path) -> None:
    import pwd
    import shutil
    import tempfile


    nobody = pwd.getpwnam("nobody")
    d = Path(tempfile.mkdtemp(prefix="uc-users-", dir="/tmp"))  # reachable by nobody
    try:
        d.chmod(0o755)
        layout = CounterLayout.of()
        table = TableWriter(str(d / "t"), 1024, counters=layout)
        counters = CounterHarvester(str(d / "c"), layout)
        f = d / "data"
        f.write_bytes(os.urandom(300_000))
        f.chmod(0o644)
        st = f.stat()
        fid = file_id_of(table.salt, st.st_dev, st.st_ino)
        table.publish(1, CHUNK, 4096, [ShmEntry(fid, i, frozenset(cpus())) for i in range(5)])

        def drop() -> None:
            os.setgid(nobody.pw_gid)
            os.setuid(nobody.pw_uid)

        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"),
               "LD_PRELOAD": str(shim_build / "libunicache.so"),
               "UNICACHE_TABLE": str(d / "t"), "UNICACHE_COUNTERS": str(d / "c")}
        out = subprocess.run(["cat", str(f)], env=env, capture_output=True, check=True,
                             preexec_fn=drop)
        assert out.stdout == f.read_bytes()
        # counted in nobody's own file, which only nobody may write
        mine = d / "c" / str(nobody.pw_uid)
        assert (mine.stat().st_uid, mine.stat().st_mode & 0o777) == (nobody.pw_uid, 0o600)
        assert sum(c.bytes_read for c in counters.harvest(0).chunks) == st.st_size
        table.close()
        counters.close()
    finally:
        shutil.rmtree(d)


def test_table_writable_by_others_is_ignored(shim_env: ShimEnv, tmp_path: Path) -> None:
    f = make_files(tmp_path, 9)[-1]
    _table_for(shim_env, [f], 9, BUDGET_UNLIMITED)
    Path(shim_env.env["UNICACHE_TABLE"]).chmod(0o666)  # anyone could shrink it: unsafe
    out = subprocess.run(["cat", str(f)], env=shim_env.env, capture_output=True, check=True)
    assert out.stdout == f.read_bytes()
    assert shim_env.counters.harvest(0).chunks == ()  # the shim stayed the plain call


@pytest.mark.parametrize(
    ("argv", "counted"),
    [(["sha256sum"], False),  # stdio: glibc's internal read, not interposable
     (["wc", "-c", "-l"], True), (["grep", "-c", "-a", "e"], True), (["tar", "cf", "-"], True),
     (["python3", "-c", "import sys; [sys.stdout.write(str(len(open(p, 'rb').read())) + ' ')"
                        " for p in sys.argv[1:]]"], True)],
    ids=["sha256sum", "wc", "grep", "tar", "python"],
)
def test_real_programs_give_identical_output(shim_env: ShimEnv, tmp_path: Path,
                                             argv: list[str], counted: bool) -> None:
    files = make_files(tmp_path, 12)
    _table_for(shim_env, files, 12, BUDGET_UNLIMITED)
    names = [f.name for f in files]
    plain_env = {k: v for k, v in shim_env.env.items() if k != "LD_PRELOAD"}
    plain = subprocess.run([*argv, *names], cwd=tmp_path, env=plain_env, capture_output=True)
    shim = subprocess.run([*argv, *names], cwd=tmp_path, capture_output=True,
                          env={**shim_env.env, "UNICACHE_NT_READ": "1"})
    assert (shim.returncode, shim.stdout, shim.stderr) == (plain.returncode, plain.stdout,
                                                          plain.stderr)
    assert (sum(c.bytes_read for c in shim_env.counters.harvest(0).chunks) > 0) == counted


def test_sendfile_identical_and_counted(shim_env: ShimEnv, tmp_path: Path) -> None:
    f = make_files(tmp_path, 13)[-1]
    _table_for(shim_env, [f], 13, BUDGET_UNLIMITED)
    script = (
        "import os, socket, sys\n"
        "fd = os.open(sys.argv[1], os.O_RDONLY)\n"
        "size = os.fstat(fd).st_size\n"
        "a, b = socket.socketpair()\n"
        "out = bytearray()\n"
        "def drain():\n"
        "    b.setblocking(False)\n"
        "    try:\n"
        "        while True: out.extend(b.recv(1 << 20))\n"
        "    except BlockingIOError: pass\n"
        "sent = 0\n"
        "while sent < size:\n"  # explicit offsets, the file position untouched
        "    n = os.sendfile(a.fileno(), fd, sent, 65536); sent += n; drain()\n"
        "assert os.lseek(fd, 0, os.SEEK_CUR) == 0\n"
        "while os.sendfile(a.fileno(), fd, None, 65536):\n"  # the file position
        "    drain()\n"
        "drain()\n"
        "sys.stdout.buffer.write(bytes(out))\n"
    )
    res = subprocess.run(["python3", "-c", script, str(f)], env=shim_env.env,
                         capture_output=True, check=True)
    assert res.stdout == f.read_bytes() * 2
    fid = shim_env.file_id(f)
    counts = shim_env.counters.harvest(0).chunks
    assert sum(c.bytes_read for c in counts if c.file_id == fid) == 2 * f.stat().st_size


def test_errno_untouched_when_the_mmap_path_falls_back(shim_env: ShimEnv) -> None:
    # a sysfs file: regular, 4096 bytes, mmap fails (ENODEV), pread works; the driver
    # sets errno to a sentinel before each call and compares it after success too
    sysfs = Path("/sys/devices/system/cpu/online")
    st = sysfs.stat()
    fid = file_id_of(shim_env.table.salt, st.st_dev, st.st_ino)
    shim_env.table.publish(1, 4096, 0, [ShmEntry(fid, 0, frozenset(cpus()), caching=False)])
    res = shim_env.run("check", "31", "300", str(sysfs))
    assert res.returncode == 0, res.stderr[-2000:]
    assert "mismatches=0" in res.stdout


def test_a_chunk_read_first_since_the_harvest_moves_the_inserts_the_agent_polls(
        shim_env: ShimEnv, tmp_path: Path) -> None:
    # the agent's early report (unicache_agent.early) polls this count, not the regions; a
    # chunk's counts reach them when the thread's run on it ends (uc_counters.c): when it
    # reads elsewhere, or closes the file
    f = tmp_path / "data"
    f.write_bytes(bytes(range(256)) * 1024)
    fid = shim_env.file_id(f)
    shim_env.table.publish(1, CHUNK, CHUNK, [])
    shim_env.counters.harvest(0)
    before = shim_env.counters.inserts()
    with Reader(shim_env, f) as r:  # the reader's own start-up reads count too
        r.pread(0, 4096)
        r.pread(CHUNK + 4096, 4096)  # elsewhere: chunk 0's run goes
        after_one = shim_env.counters.inserts()
        assert after_one > before and (fid, 0) in shim_env.counters.active_chunks()
        assert (fid, 1) not in shim_env.counters.active_chunks()  # still the open run
        r.pread(0, 4096)
        assert shim_env.counters.inserts() > after_one
    assert {(fid, 0), (fid, 1)} <= shim_env.counters.active_chunks()
    shim_env.counters.harvest(0)
    assert (fid, 0) not in shim_env.counters.active_chunks()  # the harvest flipped regions


def test_a_run_the_agent_harvested_since_it_opened_goes_out_at_its_next_call(
        shim_env: ShimEnv, tmp_path: Path) -> None:
    # a slow reader keeps its run open for many calls (uc_counters.c); the table header's
    # `harvests` bounds how long: its first call after the agent's next harvest that does
    # not continue the run inside its chunk sends it (a read that does is one cache line
    # of the thread's and the descriptor's, no more: uc_continues)
    f = tmp_path / "data"
    f.write_bytes(bytes(range(256)) * 1024)
    fid = shim_env.file_id(f)
    shim_env.table.publish(1, CHUNK, CHUNK, [])
    with Reader(shim_env, f) as r:
        r.pread(0, 4096)
        shim_env.counters.harvest(0)  # the reader's start-up reads go
        r.pread(4096, 4096)  # joins the run opened before the harvest: nothing sent
        assert (fid, 0) not in shim_env.counters.active_chunks()
        shim_env.table.mark_harvest()
        r.pread(8192, 4096)  # continues the run in its chunk: still open
        assert (fid, 0) not in shim_env.counters.active_chunks()
        r.pread(0, 4096)  # a re-read: the run is older than the harvest, it goes out
        assert (fid, 0) in shim_env.counters.active_chunks()
        sent = [c for c in shim_env.counters.harvest(0).chunks if c.file_id == fid]
        shim_env.table.mark_harvest()
    assert sum(c.bytes_read for c in sent) == 12288  # the reads before the re-read, exactly
    # the last read's run went when the reader closed the file
    assert [c.bytes_read for c in shim_env.counters.harvest(0).chunks
            if c.file_id == fid] == [4096]
