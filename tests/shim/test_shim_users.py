"""Per-user counters (issue #12): an unprivileged user can neither write, shrink nor squat
another user's counters, and a file its own user breaks never takes the agent down.

Runs as root (as `make test` does) with ``nobody`` as the unprivileged user, in a tree
under /tmp that nobody can reach, as on a guest: the agent's directory is root's, mode
1733; each user's shim makes its own file there.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from unicache_agent.counters import DIR_MODE, CounterHarvester
from unicache_agent.shm import CounterLayout, ShmEntry, file_id_of
from unicache_agent.table_writer import TableWriter

from tests.shim.shimtools import CHUNK, cpus

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another user")

NOBODY = pwd.getpwnam("nobody")
#: the shim's line when it refuses a counters file
NOT_PRIVATE = "counters file not private to this user"


@dataclass
class Guest:
    """A table, the counters directory and a file placed in it, as a guest has them."""

    root: Path
    table: TableWriter
    counters: CounterHarvester
    data: Path
    env: dict[str, str]

    def as_nobody(self, *cmd: str, check: bool = True,
                  shim: bool = True) -> subprocess.CompletedProcess[bytes]:
        env = self.env if shim else {k: v for k, v in self.env.items() if k != "LD_PRELOAD"}
        return subprocess.run(list(cmd), env=env, capture_output=True, check=check,
                              preexec_fn=_drop, timeout=60)

    def as_root(self, *cmd: str) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(list(cmd), env=self.env, capture_output=True, check=True,
                              timeout=60)


def _drop() -> None:
    os.setgid(NOBODY.pw_gid)
    os.setuid(NOBODY.pw_uid)


@pytest.fixture
def guest(shim_build: Path) -> Iterator[Guest]:
    root = Path(tempfile.mkdtemp(prefix="uc-users-", dir="/tmp"))  # reachable by nobody
    root.chmod(0o755)
    layout = CounterLayout.of()
    table = TableWriter(str(root / "table"), 1024, counters=layout)
    counters = CounterHarvester(str(root / "counters"), layout)
    data = root / "data"
    data.write_bytes(os.urandom(5 * CHUNK + 123))
    data.chmod(0o644)
    st = data.stat()
    fid = file_id_of(table.salt, st.st_dev, st.st_ino)
    table.publish(1, CHUNK, 4096, [ShmEntry(fid, i, frozenset(cpus())) for i in range(6)])
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"),
           "LD_PRELOAD": str(shim_build / "libunicache.so"),
           "UNICACHE_TABLE": str(root / "table"), "UNICACHE_COUNTERS": str(root / "counters")}
    try:
        yield Guest(root, table, counters, data, env)
    finally:
        table.close()
        counters.close()
        shutil.rmtree(root)


def test_each_user_counts_into_a_private_file_of_its_own(guest: Guest) -> None:
    guest.as_root("cat", str(guest.data))
    guest.as_nobody("cat", str(guest.data))
    directory = guest.root / "counters"
    assert directory.stat().st_mode & 0o7777 == DIR_MODE
    for uid in (0, NOBODY.pw_uid):
        st = (directory / str(uid)).stat()
        assert (st.st_uid, st.st_mode & 0o777) == (uid, 0o600)
    # both users' reads, added per chunk
    harvest = guest.counters.harvest(0)
    assert sum(c.bytes_read for c in harvest.chunks) == 2 * guest.data.stat().st_size
    assert harvest.clients == 2


def test_another_user_can_neither_write_nor_shrink_roots_counters(guest: Guest) -> None:
    guest.as_root("cat", str(guest.data))
    mine = guest.root / "counters" / "0"
    before = mine.read_bytes()
    # the attacks of issue #12 on the old shared file: rewrite the header, truncate it
    for attack in (f"printf 'XXXXXXXX' | dd of={mine} conv=notrunc status=none",
                   f"truncate -s 100 {mine}", f": > {mine}", f"rm -f {mine}"):
        res = guest.as_nobody("sh", "-c", attack, check=False)
        assert res.returncode != 0, attack
        assert b"Permission denied" in res.stderr or b"Operation not permitted" in res.stderr
    assert mine.read_bytes() == before
    # and root's processes read the file, counted, as before
    out = guest.as_root("cat", str(guest.data))
    assert out.stdout == guest.data.read_bytes() and NOT_PRIVATE not in out.stderr.decode()
    assert sum(c.bytes_read for c in guest.counters.harvest(0).chunks) == \
        2 * guest.data.stat().st_size


@pytest.mark.parametrize("squat", ["file", "symlink"])
def test_a_name_squatted_by_another_user_is_refused_then_removed(guest: Guest,
                                                                 squat: str) -> None:
    target = guest.root / "counters" / "0"
    if squat == "file":  # nobody makes root's file first, its own and world-writable
        guest.as_nobody("sh", "-c", f"umask 0; truncate -s {guest.counters.layout.size} "
                        f"{target}")
    else:  # nobody points root's name at a file of its choice
        guest.as_nobody("ln", "-s", "/etc/shadow", str(target))
    assert target.is_symlink() or target.stat().st_uid == NOBODY.pw_uid
    out = guest.as_root("cat", str(guest.data))
    assert out.stdout == guest.data.read_bytes()  # read as ever, just not counted
    assert guest.counters.harvest(0).chunks == ()
    # the agent removed the squatter; root's next process makes its own file
    assert not target.exists() and not target.is_symlink()
    guest.as_root("cat", str(guest.data))
    assert target.stat().st_uid == 0
    assert sum(c.bytes_read for c in guest.counters.harvest(0).chunks) == \
        guest.data.stat().st_size
    assert Path("/etc/shadow").stat().st_uid == 0


def test_a_file_its_user_shrinks_is_retired_and_the_agent_carries_on(guest: Guest) -> None:
    guest.as_nobody("cat", str(guest.data))
    theirs = guest.root / "counters" / str(NOBODY.pw_uid)
    # (without the shim: a process of its own mapping the file would fault, its own loss)
    guest.as_nobody("truncate", "-s", "100", str(theirs), shim=False)
    # the agent reads users' files with pread, never through a mapping: no SIGBUS
    harvest = guest.counters.harvest(0)
    assert harvest.chunks == ()
    assert not theirs.exists()
    assert guest.counters.stats().replica_serves == 0
    # nobody's next process makes a whole file again, and is counted
    guest.as_nobody("cat", str(guest.data))
    assert sum(c.bytes_read for c in guest.counters.harvest(0).chunks) == \
        guest.data.stat().st_size


def test_a_file_of_an_older_layout_is_replaced_by_its_users_next_process(
        guest: Guest) -> None:
    guest.as_nobody("cat", str(guest.data))
    theirs = guest.root / "counters" / str(NOBODY.pw_uid)
    # the agent restarts with another layout: its table says so before it sweeps the files
    layout = CounterLayout.of(nslots=4096, ngens=8192)
    assert theirs.stat().st_size == guest.counters.layout.size != layout.size
    guest.table.close()
    guest.table = TableWriter(str(guest.root / "table"), 1024, counters=layout)
    guest.as_nobody("cat", str(guest.data))
    assert theirs.stat().st_size == layout.size  # the shim replaced its own file
    guest.counters.close()
    guest.counters = CounterHarvester(str(guest.root / "counters"), layout)
    assert sum(c.bytes_read for c in guest.counters.harvest(0).chunks) == \
        guest.data.stat().st_size


def test_a_counters_directory_made_by_another_user_is_moved_aside(guest: Guest) -> None:
    planted = guest.root / "planted"  # a sticky, world-writable directory like /dev/shm
    planted.mkdir(mode=0o1777)
    planted.chmod(0o1777)
    guest.as_nobody("sh", "-c", f"umask 0; mkdir {planted}/counters")
    layout = guest.counters.layout
    harvester = CounterHarvester(str(planted / "counters"), layout)
    try:
        st = (planted / "counters").stat()
        assert (st.st_uid, st.st_mode & 0o7777) == (0, DIR_MODE)
        aside = [p for p in planted.iterdir() if p.name.startswith("counters.foreign.")]
        assert len(aside) == 1 and aside[0].stat().st_uid == NOBODY.pw_uid
    finally:
        harvester.close()
