"""Helpers of the preload shim tests: paths, the ShimEnv bundle, a reader process, files."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

ROOT = Path(__file__).resolve().parents[2]
SHIM_DIR = ROOT / "guest-agent" / "shim"
sys.path.insert(0, str(ROOT / "guest-agent"))

from unicache_agent.counters import CounterHarvester  # noqa: E402
from unicache_agent.shm import CounterLayout, TableWriter, file_id_of  # noqa: E402

CHUNK = 65536
UCREAD = Path(__file__).resolve().parent / "ucread.py"


@dataclass
class ShimEnv:
    """A table, counters and the environment that points the shim at them."""

    table: TableWriter
    counters: CounterHarvester
    env: dict[str, str]
    selftest: Path

    def relayout(self, **layout: int) -> None:
        """Counters of another layout (``CounterLayout.of``), published in the same table
        file (its salt kept), as an agent restarted with other settings does."""
        new = CounterLayout.of(**layout)
        self.table.close()
        self.table = TableWriter(self.table.path, self.table.nbuckets, counters=new)
        self.counters.close()
        self.counters = CounterHarvester(self.counters.path, new)

    def user_counters(self) -> Path:
        """This user's counters file, made as the shim makes it: by loading it once."""
        subprocess.run(["true"], env=self.env, check=True)
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
