"""``unicache bench programs``: ordinary programs in a real guest, with and without the shim.

One guest (the project's image, ``make image``; QEMU, TCG on a host without usable KVM)
with its agent running and nothing placed: no host daemon ever greets the agent, so the
shared table is the one the agent publishes at its start (``/dev/shm/unicache-table``,
valid, no entry) and the shims' counters are never harvested. Five ordinary programs
(:func:`programs`) run in the guest under the image's shim (``LD_PRELOAD`` of
``/usr/lib/unicache-agent/libunicache.so``: the operator's scope) and without it:

* ``tar``: ``tar cf - TREE | wc -c`` (GNU tar special-cases ``-f /dev/null``; a pipe is
  written for real);
* ``grep``: ``grep -rc import TREE`` (every file read whole);
* ``sha256sum``: of many small files (512 B to 8 KiB, written by the bench);
* ``python3``: ``python3 -c 'import json, email, http.client'``;
* ``sqlite3``: a query that scans a table of some thousands of rows (written by the bench).

TREE is ``/usr/lib/python3.11`` (``--tiny``: its ``email`` package). Everything is read
once first (the page cache warm), then each program runs once per side, untimed (warm-up);
then ``rounds`` rounds: per round, each program runs W O O W (odd rounds O W W O), each
run timed on the guest's clock (:file:`guest_programs_runner.py`, sent to the guest's
python3), so that the TCG guest's noise hits both sides alike. Under TCG that clock counts
the guest's instructions (``--clock instructions``, the default there: QEMU's -icount,
one vCPU), so a run's time is its work, repeatable to a tenth of a per cent whatever else
the host runs; ``--clock wall`` times the emulator instead, whose noise on a shared 2-core
host is some 20 % a run. Each run's neighbours of the
other side make its pairs: per program, the speed ratio is the median over pairs of
(seconds without / seconds with), 1.0 meaning the shim costs nothing, with its
distribution-free 95 % interval (:mod:`shim_stats`); the goal is a ratio of at least
:data:`GOAL`.

A run that proves nothing fails the bench (:class:`BenchError`): a program that exits
non-zero or prints other output on one side; a table missing, invalid or holding entries
(something placed); a run under the shim of a program whose reads go through the calls
the shim sees (all but ``sha256sum``: coreutils reads through stdio, whose internal
``read`` no preload sees, docs/agent.md "What the shim cannot see", so its streams'
descriptors pass and it maps nothing) whose processes never mapped the counters (the shim
not live in it) or counted no read; a run without the shim that counted anything.
"""

from __future__ import annotations

import os
import shlex
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from unicache.bench import shim_stats
from unicache.errors import BenchError
from unicache.host.qemu.accel import cache_dir, choose_accel

#: the guest program (read as text, run by the guest's python3)
GUEST_PROGRAM = Path(__file__).with_name("guest_programs_runner.py")
#: the largest open sample shift (unicache_agent.shm.SAMPLE_SHIFT_MAX): a table carrying it
#: leaves out practically every open of the files it covers, so a run may count nothing
MAX_SHIFT = 15
#: the image's agent package and shim (images/build-image.sh)
AGENT_LIB = "/usr/lib/unicache-agent"
SHIM = f"{AGENT_LIB}/libunicache.so"
#: the image's demo/test tools: the calls' timer and a preload that does nothing
SELFTEST = "/usr/local/lib/unicache-demo/uc_selftest"
NULL_PRELOAD = "/usr/local/lib/unicache-demo/libuc_null.so"
#: where the guest keeps the bench's files (the image's disk, not a tmpfs)
DATA_DIR = "/var/tmp/unicache-bench-programs"
#: the speed ratio (without / with) each program must reach
GOAL = 0.98
#: the guest (small: a 2-core host under TCG)
GUEST_VCPUS = 2
GUEST_MEMORY_MIB = 1024
BOOT_TIMEOUT_S = 180.0
#: seconds the guest gives one call of the runner (four runs of one program)
RUNS_TIMEOUT_S = 600.0
#: the most rounds a run may ask for
MAX_ROUNDS = 100
SCHEMA = 1
#: the guest's clock: the host's (``wall``), or one that counts the guest's instructions
#: (``instructions``: QEMU's -icount, TCG only); ``auto`` chooses (:func:`resolve_clock`)
CLOCK_WALL = "wall"
CLOCK_INSTRUCTIONS = "instructions"
CLOCK_AUTO = "auto"
CLOCKS = (CLOCK_AUTO, CLOCK_INSTRUCTIONS, CLOCK_WALL)
#: under ``instructions``, an instruction is 2**ICOUNT_SHIFT ns of guest time, on one vCPU
#: (QEMU 7.2's guest kernel does not bring a second one up under -icount sleep=off)
ICOUNT_SHIFT = 0


@dataclass(frozen=True, slots=True)
class Sizes:
    """What the programs work on.

    :param tree: the tree ``tar`` and ``grep`` read.
    :param small_files: files ``sha256sum`` reads.
    :param sqlite_rows: rows of the table the query scans.
    :param calls: iterations per batch of ``uc_selftest calls``.
    :param starts: process starts timed per preload.
    """

    tree: str
    small_files: int
    sqlite_rows: int
    calls: int
    starts: int


FULL = Sizes("/usr/lib/python3.11", 2000, 50_000, 2000, 21)
TINY = Sizes("/usr/lib/python3.11/email", 100, 2_000, 100, 3)


@dataclass(frozen=True, slots=True)
class Program:
    """One program timed.

    :param name: its short name.
    :param argv: the command.
    :param cwd: where it runs.
    :param counted: whether the shim sees its reads (``False``: it reads through stdio).
    """

    name: str
    argv: tuple[str, ...]
    cwd: str = "/"
    counted: bool = True

    @property
    def command(self) -> str:
        """The command as a shell line (long argument lists cut)."""
        if len(self.argv) > 6:
            return shlex.join(self.argv[:3]) + f" ... ({len(self.argv) - 1} files)"
        return shlex.join(self.argv)


def programs(sizes: Sizes) -> tuple[Program, ...]:
    """The programs at these sizes (module docstring)."""
    parent, base = os.path.split(sizes.tree.rstrip("/"))
    small = f"{DATA_DIR}/small"
    # no index on v: every row is read (and no quote in it: the command reads plainly)
    query = "SELECT count(*), sum(length(body)), max(v) FROM t WHERE v % 7 = 3"
    return (
        Program("tar", ("sh", "-c", f"tar cf - -C {shlex.quote(parent)} {shlex.quote(base)}"
                                    " | wc -c")),
        Program("grep", ("grep", "-rc", "import", sizes.tree)),
        Program("sha256sum", ("sha256sum", *(f"f{i:05d}" for i in range(sizes.small_files))),
                cwd=small, counted=False),
        Program("python3", ("python3", "-c", "import json, email, http.client")),
        Program("sqlite3", ("sqlite3", f"{DATA_DIR}/bench.db", query)),
    )


@dataclass(frozen=True, slots=True)
class Run:
    """One timed run.

    :param side: ``with`` (under the shim) or ``without``.
    :param seconds: its time, on the guest's clock.
    :param counted_bytes: bytes the shim counted during it.
    :param counted_reads: reads (runs of calls) the shim counted during it.
    :param clients: processes that mapped the counters during it.
    :param digest: a digest of its output.
    """

    side: str
    seconds: float
    counted_bytes: int
    counted_reads: int
    clients: int
    digest: str


@dataclass(frozen=True, slots=True)
class ProgramResult:
    """One program's comparison.

    :param name: the program.
    :param command: its command line.
    :param with_s: median seconds under the shim.
    :param without_s: median seconds without it.
    :param ratio: median over pairs of without / with (1.0: no cost).
    :param ci_low: low end of the ratio's 95 % interval.
    :param ci_high: high end.
    :param output: the first line of its output (the same on both sides).
    :param counted: whether the shim is expected to count its reads.
    :param runs: the timed runs, in order.
    """

    name: str
    command: str
    with_s: float
    without_s: float
    ratio: float
    ci_low: float
    ci_high: float
    output: str
    counted: bool
    runs: tuple[Run, ...]

    @property
    def pairs(self) -> int:
        """Timed pairs (runs under the shim, each with its neighbour without it)."""
        return sum(1 for r in self.runs if r.side == "with")

    @property
    def met(self) -> bool:
        """The median ratio reaches :data:`GOAL`."""
        return self.ratio >= GOAL

    @property
    def interval_met(self) -> bool:
        """The whole interval reaches :data:`GOAL` (met beyond the noise)."""
        return self.ci_low >= GOAL

    def as_json(self) -> dict[str, Any]:
        with_runs = [r for r in self.runs if r.side == "with"]
        return {
            "name": self.name, "command": self.command, "with_s": round(self.with_s, 4),
            "without_s": round(self.without_s, 4), "ratio": round(self.ratio, 4),
            "ci_low": round(self.ci_low, 4), "ci_high": round(self.ci_high, 4),
            "pairs": self.pairs, "met": self.met, "interval_met": self.interval_met,
            "output": self.output, "counted": self.counted,
            "counted_bytes": sum(r.counted_bytes for r in with_runs),
            "counted_reads": sum(r.counted_reads for r in with_runs),
            "with_runs_s": [round(r.seconds, 4) for r in with_runs],
            "without_runs_s": [round(r.seconds, 4) for r in self.runs if r.side == "without"],
            "with_digests": [r.digest for r in with_runs],
            "without_digests": [r.digest for r in self.runs if r.side == "without"],
        }


@dataclass(frozen=True, slots=True)
class GuestProgramsResult:
    """One ``bench programs`` run.

    :param rounds: rounds run.
    :param tiny: whether the sizes were ``--tiny``'s.
    :param sizes: what the programs worked on.
    :param accel: QEMU's accelerator, ``kvm`` or ``tcg``.
    :param accel_why: why it was chosen.
    :param clock: the guest's clock: ``instructions`` (one instruction is a nanosecond of
        guest time) or ``wall``.
    :param kernel: the guest's kernel.
    :param table: the shared table as the runs saw it (valid, version, entries).
    :param agent_pid: the guest agent's pid.
    :param programs: per program, its comparison.
    :param calls: ns per iteration of a bare system call, open + close, and open + each
        fstat the shim chooses between + close (``uc_selftest calls``, no preload).
    :param starts: per command, median us of its start with no preload, a preload that
        does nothing, the shim, and the shim switched off by its scope file.
    :param boot_s: seconds the guest took to boot.
    :param seconds: seconds of the whole run, boot to stop.
    :param load: this host's load average (1 min) at the start and the end.
    """

    rounds: int
    tiny: bool
    sizes: Sizes
    accel: str
    accel_why: str
    clock: str
    kernel: str
    table: dict[str, Any]
    agent_pid: int
    programs: tuple[ProgramResult, ...]
    calls: dict[str, float]
    starts: dict[str, dict[str, float]]
    boot_s: float
    seconds: float
    load: tuple[float, float]

    def as_json(self) -> dict[str, Any]:
        """The JSON ``unicache bench programs --json`` prints."""
        return {
            "schema": SCHEMA, "bench": "programs", "goal": GOAL, "rounds": self.rounds,
            "tiny": self.tiny, "accel": self.accel, "accel_why": self.accel_why,
            "clock": self.clock,
            "guest": {"vcpus": 1 if self.clock == CLOCK_INSTRUCTIONS else GUEST_VCPUS,
                      "memory_mib": GUEST_MEMORY_MIB,
                      "kernel": self.kernel, "agent_pid": self.agent_pid, "shim": SHIM},
            "sizes": {"tree": self.sizes.tree, "small_files": self.sizes.small_files,
                      "sqlite_rows": self.sizes.sqlite_rows},
            "table": self.table, "programs": [p.as_json() for p in self.programs],
            "calls": self.calls, "starts": self.starts,
            "all_met": all(p.met for p in self.programs),
            "boot_s": round(self.boot_s, 1), "seconds": round(self.seconds, 1),
            "load": [round(x, 2) for x in self.load],
        }


def steps(rounds: int) -> int:
    """Progress steps of a run: boot, prepare, a warm-up and ``rounds`` rounds of every
    program, the calls, stop."""
    return 4 + (rounds + 1) * len(programs(FULL))


def sides(round_index: int) -> tuple[str, ...]:
    """The order of a round's runs: W O O W, then O W W O, alternately."""
    return ("with", "without", "without", "with") if round_index % 2 == 0 else (
        "without", "with", "with", "without")


def compare(program: Program, runs: Sequence[Run], output: str) -> ProgramResult:
    """The paired comparison of ``runs``: each call's i-th run with the shim against its
    i-th without (neighbours in W O O W / O W W O)."""
    with_s = [r.seconds for r in runs if r.side == "with"]
    without_s = [r.seconds for r in runs if r.side == "without"]
    ratios = [o / w for w, o in zip(with_s, without_s, strict=True) if w > 0]
    if not ratios:
        raise BenchError(f"{program.name}: no timed pair")
    low, mid, high = shim_stats.median_ci(ratios)
    return ProgramResult(program.name, program.command, statistics.median(with_s),
                         statistics.median(without_s), mid, low, high, output,
                         program.counted, tuple(runs))


def resolve_clock(clock: str, image: Any, state: Path) -> str:
    """The clock ``auto`` means on this host: ``instructions`` where the guest runs under
    TCG anyway (its time is the emulator's, noisy on a shared host; counted instructions
    are the work itself), ``wall`` where KVM runs it.

    :raises BenchError: on an unknown clock.
    """
    if clock not in CLOCKS:
        raise BenchError(f"--clock takes {', '.join(CLOCKS)}, not {clock!r}")
    if clock != CLOCK_AUTO:
        return clock
    choice = choose_accel(image.kernel, image.initrd, cache_dir(state))
    return CLOCK_INSTRUCTIONS if choice.accel == "tcg" else CLOCK_WALL
