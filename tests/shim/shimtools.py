"""Helpers of the preload shim tests: paths, the ShimEnv bundle, a reader process, files."""

from __future__ import annotations

import os
import random
import select
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

ROOT = Path(__file__).resolve().parents[2]
SHIM_DIR = ROOT / "guest-agent" / "shim"
sys.path.insert(0, str(ROOT / "guest-agent"))

from unicache_agent.counters import CounterHarvester  # noqa: E402
from unicache_agent.replica_server import ReplicaServer  # noqa: E402
from unicache_agent.replica_store import ReplicaStore  # noqa: E402
from unicache_agent.shm import (  # noqa: E402
    CounterLayout,
    CpuNodes,
    ShmEntry,
    file_id_of,
)
from unicache_agent.table_writer import TableWriter  # noqa: E402

CHUNK = 65536
UCREAD = Path(__file__).resolve().parent / "ucread.py"


class ReplicaAgent:
    """The agent's replica store and socket, served by a thread of the test process.

    It follows the table as the agent follows the host's tables (the replicas a table
    lists are wanted, the others dropped) at once: :meth:`attach` wraps the table's
    ``publish``, so tests publish tables as they always did.

    :param root: the store's directory (``UNICACHE_REPLICAS``).
    :param table: the table whose replica entries say what is wanted.
    :param nodes: the guest nodes, each with this share of the machine's memory.
    """

    def __init__(self, root: Path, table: TableWriter, nodes: tuple[int, ...] = (0,),
                 budget_ratio: float = 0.10, mount: bool = False) -> None:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        self.root = root
        #: held while the thread serves; hold it to use the store from the test
        self.lock = threading.Lock()
        self.attach(table)
        self.store = ReplicaStore(str(root), dict.fromkeys(nodes, total // len(nodes)),
                                  table.salt, budget_ratio=budget_ratio, mount=mount)
        self.server = ReplicaServer(self.store, str(root / "socket"))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def attach(self, table: TableWriter) -> None:
        """Follow this table from now on: each publish updates the store before it returns
        (as the agent's placement handler does)."""
        publish = table.publish

        def publish_and_follow(version: int, chunk_size: int, min_read_size: int,
                               entries: Iterable[ShmEntry], numa: bool = False) -> int:
            entries = list(entries)
            with self.lock:
                n = publish(version, chunk_size, min_read_size, entries, numa=numa)
                if hasattr(self, "store"):
                    self.store.set_table(chunk_size, {(e.file_id, e.chunk): e.replica_nodes
                                                      for e in entries if e.replica_nodes})
            return n

        table.publish = publish_and_follow  # type: ignore[method-assign]
        self.table = table

    def _run(self) -> None:
        while not self._stop.is_set():
            with self.lock:
                fds = self.server.fds()
            ready, _, _ = select.select(fds, [], [], 0.05)
            with self.lock:
                self.server.handle(ready)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.server.close()
        self.store.close(unmount=True)


@dataclass
class ShimEnv:
    """A table, counters and the environment that points the shim at them."""

    table: TableWriter
    counters: CounterHarvester
    env: dict[str, str]
    selftest: Path
    replicas: ReplicaAgent

    def relayout(self, cpu_nodes: CpuNodes | None = None, **layout: int) -> None:
        """Counters of another layout (``CounterLayout.of``), published in the same table
        file (its salt kept), as an agent restarted with other settings does; with
        ``cpu_nodes``, another guest topology in the table and the harvest."""
        new = CounterLayout.of(**layout)
        self.table.close()
        self.table = TableWriter(self.table.path, self.table.nbuckets, counters=new,
                                 cpu_nodes=cpu_nodes)
        self.replicas.attach(self.table)
        self.counters.close()
        self.counters = CounterHarvester(self.counters.path, new, self.table.cpu_nodes)

    def user_counters(self) -> Path:
        """This user's counters file, made as the shim makes it: by a process that opens
        a file (the shim maps the agent's files at its first open)."""
        subprocess.run(["cat", os.devnull], env=self.env, check=True)
        path = Path(self.counters.user_path())
        assert path.is_file(), f"the shim did not create {path}"
        return path

    def file_id(self, path: Path) -> int:
        st = path.stat()
        return int(file_id_of(self.table.salt, st.st_dev, st.st_ino))

    def run(self, *args: str, cpu: int | None = None,
            extra: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        env = {**self.env, **(extra or {})}
        return subprocess.run([str(self.selftest), *args], env=env, capture_output=True,
                              text=True, timeout=120, stdin=subprocess.DEVNULL, check=False)


class Reader:
    """A process under the shim that preads and pwrites a file on command (ucread.py)."""

    def __init__(self, env: ShimEnv, path: Path, extra: dict[str, str] | None = None) -> None:
        self.proc = subprocess.Popen([sys.executable, str(UCREAD), str(path)],
                                     env={**env.env, **(extra or {})}, text=True,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE)

    def ask(self, line: str) -> str:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        return self.proc.stdout.readline().strip()

    def pread(self, off: int, n: int) -> bytes:
        return bytes.fromhex(self.ask(f"pread {off} {n}"))

    def call(self, kind: str, off: int, n: int) -> tuple[bytes, int]:
        """One read of ``kind`` (read, readv, preadv, sendfile): its bytes and the file
        position after it."""
        data, _, pos = self.ask(f"{kind} {off} {n}").rpartition(" ")  # data may be empty
        return bytes.fromhex(data), int(pos)

    def pwrite(self, off: int, data: bytes) -> None:
        assert self.ask(f"pwrite {off} {data.hex()}") == "ok"

    def __enter__(self) -> Reader:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(10)


def make_files(dirpath: Path, seed: int) -> list[Path]:
    """Random files: empty, tiny, page and chunk boundaries, and a few large ones."""
    rng = random.Random(seed)
    sizes = [0, 1, 4095, 4096, CHUNK - 1, CHUNK + 1, 3 * CHUNK,
             rng.randrange(1, 1 << 20), rng.randrange(1 << 20, 3 << 20)]
    out = []
    for i, size in enumerate(sizes):
        p = dirpath / f"f{i}"
        p.write_bytes(rng.randbytes(size))
        out.append(p)
    return out


def cpus() -> list[int]:
    return sorted(os.sched_getaffinity(0))


def build_files_reader(out: Path) -> Path:
    """files_reader.c built into out: reads the files it is given, whole, one by one
    (``--stat`` first: fstat after each open, as most programs do)."""
    exe = out / "files_reader"
    subprocess.run(["gcc", "-O2", "-Wall", "-Werror", "-o", str(exe),
                    str(Path(__file__).with_name("files_reader.c"))], check=True)
    return exe


def build_mutant(out: Path, define: str) -> Path:
    """The shim built by its own Makefile with ``define`` (a -D flag naming one of its
    test-only mutants), in a copy of its sources under out.

    :returns: the mutant libunicache.so
    """
    src = out / "shim"
    src.mkdir()
    for p in SHIM_DIR.iterdir():
        if p.suffix in (".c", ".h") or p.name == "Makefile":
            shutil.copy2(p, src / p.name)
    subprocess.run(["make", "-s", "-C", str(src), "libunicache.so", f"CFLAGS=-O2 {define}"],
                   check=True)
    return src / "libunicache.so"
