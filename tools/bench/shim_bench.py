"""``unicache bench shim``: read() throughput with and without libunicache.so, and lookup cost.

Measures on this machine, in one run of one process (guest-agent/shim/uc_selftest
``abbench``) under ``LD_PRELOAD=libunicache.so`` with a placement table that places the
file's chunk on every CPU (so the shim looks the chunk up and counts on every call, and
never needs to migrate):

* ``with_mbps``: blocks of 8 ``lseek(0)`` + ``read(256 KiB)`` calls through the shim's
  ``read`` over a page-cached file;
* ``without_mbps``: the same blocks through libc's own ``read`` (looked up with ``dlsym``
  on libc), alternating with the first, so that noise from other processes on the machine
  hits both alike; each figure uses the median block of its run, so blocks that lost the
  CPU to another process count for neither;
* ``lookup_ns``: the shim's own table lookup, timed in a loop over 4096 placed chunks
  (``uc_bench_lookup``);
* ``nt_mbps``: one more run with the chunk marked non-caching and ``UNICACHE_NT_READ=1``, so
  read() takes the shim's mmap + prefetchnta path (docs/agent.md), against libc's read().

The figures are medians over rounds (the ratio: the median of per-round ratios); the
process is pinned to one CPU.

Benchmark code, not the product's: it builds the shim and imports the agent from the
source checkout, so it lives there too (``tools/bench/``), and ``unicache bench shim``
(:mod:`unicache.cli.bench`) loads it from the checkout.
"""

from __future__ import annotations

import ctypes
import importlib
import os
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from unicache.errors import BenchError, ConfigError

#: the repository's guest-agent directory (the bench runs from a source checkout)
GUEST_AGENT = Path(__file__).resolve().parents[2] / "guest-agent"
SHIM_DIR = GUEST_AGENT / "shim"
#: chunk size of the bench table (MFC §4.7 chunks; any power of two works)
CHUNK_SIZE = 256 * 1024
#: placed chunks for the lookup timing
LOOKUP_KEYS = 4096


@dataclass(frozen=True, slots=True)
class ShimBenchResult:
    """Figures of one ``bench shim`` run.

    :param with_mbps: median read() throughput under the shim, MB/s (10^6 bytes).
    :param without_mbps: median read() throughput without it, MB/s.
    :param ratio: median over rounds of with / without (each round measures both).
    :param lookup_ns: mean cost of one table lookup, ns.
    :param read_size: bytes per read() call.
    :param rounds: rounds run.
    :param seconds: seconds per run.
    :param cpu: the CPU both runs were pinned to.
    :param with_runs: every with-shim figure.
    :param without_runs: every without-shim figure.
    :param nt_mbps: read() throughput when the chunk is marked non-caching and read() takes
        the shim's mmap + prefetchnta path (``UNICACHE_NT_READ=1``), MB/s.
    :param nt_without_mbps: libc's read() in the same run, MB/s.
    """

    with_mbps: float
    without_mbps: float
    ratio: float
    lookup_ns: float
    read_size: int
    rounds: int
    seconds: float
    cpu: int
    with_runs: tuple[float, ...]
    without_runs: tuple[float, ...]
    nt_mbps: float
    nt_without_mbps: float

    def as_json(self) -> dict[str, Any]:
        """The JSON ``unicache bench shim --json`` prints."""
        return {"with_mbps": round(self.with_mbps, 1), "without_mbps": round(self.without_mbps, 1),
                "ratio": round(self.ratio, 4), "lookup_ns": round(self.lookup_ns, 2),
                "read_size": self.read_size, "rounds": self.rounds, "seconds": self.seconds,
                "cpu": self.cpu, "with_runs": [round(x, 1) for x in self.with_runs],
                "without_runs": [round(x, 1) for x in self.without_runs],
                "nt_mbps": round(self.nt_mbps, 1),
                "nt_without_mbps": round(self.nt_without_mbps, 1)}


def _agent_module(name: str) -> Any:
    """A guest agent module (stdlib only: shm, counters), imported from the checkout."""
    if str(GUEST_AGENT) not in sys.path:
        sys.path.insert(0, str(GUEST_AGENT))
    return importlib.import_module(f"unicache_agent.{name}")


def build_shim() -> Path:
    """Build the shim and its driver if needed.

    :returns: the shim directory.
    :raises BenchError: when the build fails.
    """
    try:
        subprocess.run(["make", "-s", "-C", str(SHIM_DIR), "all"], check=True,
                       capture_output=True, text=True)
    except (OSError, subprocess.CalledProcessError) as err:
        detail = getattr(err, "stderr", "") or ""
        raise BenchError(f"cannot build the shim in {SHIM_DIR}: {detail.strip()[-200:]}") from err
    return SHIM_DIR


def _run_driver(args: list[str], env: dict[str, str], cpu: int) -> tuple[float, float]:
    res = subprocess.run([str(SHIM_DIR / "uc_selftest"), *args], env=env, capture_output=True,
                         text=True, timeout=600, check=False,
                         preexec_fn=lambda: os.sched_setaffinity(0, {cpu}))
    if res.returncode != 0 or not res.stdout.startswith("with_mbps="):
        raise BenchError(f"bench driver failed (status {res.returncode}): "
                         f"{res.stderr.strip()[-200:]}")
    fields = dict(kv.split("=", 1) for kv in res.stdout.split())
    return float(fields["with_mbps"]), float(fields["without_mbps"])


def _lookup_ns(table_path: Path, ctr_path: Path, file_id: int, iters: int) -> float:
    """Time the shim's lookup in this process (the library is loaded RTLD_LOCAL: its
    read() and friends do not interpose on ours)."""
    saved = {k: os.environ.get(k) for k in ("UNICACHE_TABLE", "UNICACHE_COUNTERS")}
    os.environ["UNICACHE_TABLE"] = str(table_path)
    os.environ["UNICACHE_COUNTERS"] = str(ctr_path)
    try:
        lib = ctypes.CDLL(str(SHIM_DIR / "libunicache.so"))
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    fn = lib.uc_bench_lookup
    fn.restype = ctypes.c_double
    fn.argtypes = [ctypes.c_uint64, ctypes.c_uint64, ctypes.c_uint64,
                   ctypes.POINTER(ctypes.c_uint64)]
    hits = ctypes.c_uint64(0)
    ns = float(fn(file_id, LOOKUP_KEYS, iters, ctypes.byref(hits)))
    if ns < 0 or hits.value != iters:
        raise BenchError(f"lookup timing failed (result {ns}, {hits.value}/{iters} hits)")
    return ns


def run_shim_bench(rounds: int = 7, seconds: float = 1.0, read_size: int = 256 * 1024,
                   lookup_iters: int = 2_000_000) -> ShimBenchResult:
    """Measure the shim's overhead on read() and its lookup cost.

    :param rounds: alternating with/without rounds.
    :param seconds: length of each run.
    :param read_size: bytes per read() (the file is this large and stays cached).
    :param lookup_iters: lookups timed for ``lookup_ns``.
    :returns: the figures.
    :raises ConfigError: on a bad parameter.
    :raises BenchError: when the shim or its driver cannot run.
    """
    if rounds < 1 or seconds <= 0 or not 4096 <= read_size <= 1 << 20:
        raise ConfigError("rounds >= 1, seconds > 0 and 4096 <= read size <= 1 MiB required")
    build_shim()
    shm = _agent_module("shm")
    harvester = _agent_module("counters").CounterHarvester
    cpu = max(os.sched_getaffinity(0))
    with tempfile.TemporaryDirectory(prefix="unicache-bench-") as tmp:
        d = Path(tmp)
        data = d / "data"
        data.write_bytes(os.urandom(read_size))
        layout = shm.CounterLayout.of()
        table = shm.TableWriter(str(d / "table"), counters=layout)
        counters = harvester(str(d / "counters"), layout)
        st = data.stat()
        fid = shm.file_id_of(table.salt, st.st_dev, st.st_ino)
        every = frozenset(os.sched_getaffinity(0))
        # the bench file's chunk, plus LOOKUP_KEYS - 1 more chunks of a fake file id
        entries = [shm.ShmEntry(fid, i, every, True, shm.BUDGET_UNLIMITED)
                   for i in range(LOOKUP_KEYS)]
        table.publish(1, CHUNK_SIZE, 64 * 1024, entries)
        base = {k: v for k, v in os.environ.items()
                if not k.startswith("UNICACHE_") and k != "LD_PRELOAD"}
        # the shim's own table, counters and nothing else from the caller's environment
        shim_env = {**base, "LD_PRELOAD": str(SHIM_DIR / "libunicache.so"),
                    "UNICACHE_TABLE": str(d / "table"), "UNICACHE_COUNTERS": str(d / "counters")}
        args = ["abbench", str(data), str(read_size), str(seconds)]
        with_runs: list[float] = []
        without_runs: list[float] = []
        _run_driver(["abbench", str(data), str(read_size), "0.2"], shim_env, cpu)  # warm up
        for _ in range(rounds):
            w, wo = _run_driver(args, shim_env, cpu)
            with_runs.append(w)
            without_runs.append(wo)
        harvest = counters.harvest(0)
        if sum(c.reads for c in harvest.chunks) == 0:
            raise BenchError("the shim counted no reads: it did not run under LD_PRELOAD")
        lookup = _lookup_ns(d / "table", d / "counters", fid, lookup_iters)
        # the same file marked non-caching, read() through the mmap + prefetchnta path
        table.publish(2, CHUNK_SIZE, 64 * 1024,
                      [shm.ShmEntry(fid, 0, every, False, shm.BUDGET_UNLIMITED)])
        nt, nt_without = _run_driver(args, {**shim_env, "UNICACHE_NT_READ": "1"}, cpu)
        if sum(c.nt_reads for c in counters.harvest(0).chunks) == 0:
            raise BenchError("the non-temporal path did not run")
        table.close()  # our own mapping and descriptors: a failure here is a bug to see
        counters.close()
    w, wo = statistics.median(with_runs), statistics.median(without_runs)
    # each round compares the two paths under the same load: the ratio is the median of the
    # per-round ratios, which is steadier than a ratio of medians on a shared machine
    ratio = statistics.median(a / b for a, b in zip(with_runs, without_runs, strict=True))
    return ShimBenchResult(w, wo, ratio, lookup, read_size, rounds, seconds, cpu,
                           tuple(with_runs), tuple(without_runs), nt, nt_without)
