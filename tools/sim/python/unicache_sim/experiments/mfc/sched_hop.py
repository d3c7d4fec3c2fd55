"""The scheduler's hop: how long a thread takes to move from one CPU to another and run again.

A thread migration's cost (docs/simulator.md, "Migration cost") is this hop plus the refill
of the thread's working set from the old core. The hop is measured, not modelled: a thread
pins itself to CPU A, then alternately to B and A with ``sched_setaffinity``; Linux moves
the calling thread before the call returns (the stopper thread of its old CPU migrates
it), so the call's duration is the time from leaving A to running on B. Each move is
followed by a call that pins the thread to the CPU it is already on, which measures the
call itself without a migration. The median of each is kept.

The measurement is :data:`HOP_SNIPPET`, plain Python 3 with the standard library only, so
that the same code runs on this host (``python -c``) and inside a guest (``unicache vm
exec``), where it measures a hop between two vCPUs.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass

from unicache.errors import ConfigError, UnicacheError

#: hops measured when nothing else is asked (each is a move and a same-CPU call)
DEFAULT_HOPS = 2000

#: the measurement: ``python3 -c HOP_SNIPPET HOPS [CPU_A CPU_B]`` prints one JSON object
HOP_SNIPPET = r"""
import json, os, statistics, sys, time

def cpu_now():
    with open("/proc/thread-self/stat") as fh:
        return int(fh.read().rsplit(")", 1)[1].split()[36])

def clock_mhz():
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("cpu MHz"):
                    return float(line.split(":")[1])
    except (OSError, ValueError):
        pass
    return None

def main(argv):
    hops = int(argv[1]) if len(argv) > 1 else 2000
    allowed = sorted(os.sched_getaffinity(0))
    out = {"cpus": len(allowed), "mhz": clock_mhz(), "hops": hops}
    if len(argv) > 3:
        a, b = int(argv[2]), int(argv[3])
    elif len(allowed) >= 2:
        a, b = allowed[0], allowed[1]
    else:
        out["error"] = "only one CPU: no hop to measure"
        print(json.dumps(out))
        return 0
    out["cpu_a"], out["cpu_b"] = a, b
    pin, now = os.sched_setaffinity, time.perf_counter_ns
    moves, stays, wrong = [], [], 0
    try:
        pin(0, {a})
        for i in range(hops):
            dst = b if i % 2 == 0 else a
            t0 = now()
            pin(0, {dst})
            t1 = now()
            pin(0, {dst})
            t2 = now()
            moves.append(t1 - t0)
            stays.append(t2 - t1)
            if i % 16 == 0 and cpu_now() != dst:
                wrong += 1
    finally:
        pin(0, set(allowed))
    out["move_ns"] = statistics.median(moves)
    out["move_p10_ns"] = sorted(moves)[len(moves) // 10]
    out["move_p90_ns"] = sorted(moves)[9 * len(moves) // 10]
    out["stay_ns"] = statistics.median(stays)
    out["not_moved"] = wrong
    print(json.dumps(out))
    return 0

sys.exit(main(sys.argv))
"""


@dataclass(frozen=True, slots=True)
class Hop:
    """One hop measurement.

    :param where: ``host`` or ``guest NAME``.
    :param cpus: CPUs the measuring thread could use.
    :param cpu_a: the CPU it starts on (``None`` when there is no second CPU).
    :param cpu_b: the CPU it hops to.
    :param hops: moves measured.
    :param move_ns: median time of a move A -> B (or B -> A) until the thread runs again.
    :param move_p10_ns: 10th percentile of the moves.
    :param move_p90_ns: 90th percentile of the moves.
    :param stay_ns: median time of the same call when the thread is already on the CPU.
    :param clock_ghz: the clock (``/proc/cpuinfo`` where measured) used for cycles.
    :param not_moved: sampled moves after which the thread was not on the target CPU.
    :param note: why nothing was measured, if nothing was.
    """

    where: str
    cpus: int
    cpu_a: int | None = None
    cpu_b: int | None = None
    hops: int = 0
    move_ns: float | None = None
    move_p10_ns: float | None = None
    move_p90_ns: float | None = None
    stay_ns: float | None = None
    clock_ghz: float | None = None
    not_moved: int = 0
    note: str = ""

    @property
    def move_cycles(self) -> float | None:
        """The median move in cycles of the measured machine's clock."""
        if self.move_ns is None or self.clock_ghz is None:
            return None
        return self.move_ns * self.clock_ghz

    def line(self) -> str:
        """One line for humans."""
        if self.move_ns is None:
            return f"{self.where}: {self.note}"
        cycles = self.move_cycles
        cyc = f" = {cycles:,.0f} cycles at {self.clock_ghz:.2f} GHz" if cycles else ""
        return (
            f"{self.where}: sched_setaffinity hop CPU {self.cpu_a} <-> {self.cpu_b}: "
            f"median {self.move_ns / 1e3:.2f} us{cyc} over {self.hops} hops "
            f"(p10 {self.move_p10_ns or 0:,.0f} ns, p90 {self.move_p90_ns or 0:,.0f} ns; "
            f"the same call without a move: {self.stay_ns or 0:,.0f} ns)"
        )


def parse_hop(where: str, text: str) -> Hop:
    """Read the snippet's JSON output.

    :param where: ``host`` or ``guest NAME``.
    :param text: what the snippet printed.
    :raises UnicacheError: if the output is not the snippet's.
    """
    try:
        doc = json.loads(text.strip().splitlines()[-1])
        mhz = doc.get("mhz")
        return Hop(
            where=where,
            cpus=int(doc["cpus"]),
            cpu_a=doc.get("cpu_a"),
            cpu_b=doc.get("cpu_b"),
            hops=int(doc.get("hops", 0)) if "move_ns" in doc else 0,
            move_ns=doc.get("move_ns"),
            move_p10_ns=doc.get("move_p10_ns"),
            move_p90_ns=doc.get("move_p90_ns"),
            stay_ns=doc.get("stay_ns"),
            clock_ghz=float(mhz) / 1000.0 if mhz else None,
            not_moved=int(doc.get("not_moved", 0)),
            note=str(doc.get("error", "")),
        )
    except (IndexError, KeyError, TypeError, ValueError) as err:
        raise UnicacheError(f"{where}: unexpected hop measurement output {text[-200:]!r}") from err


def _check(hops: int) -> None:
    if hops < 10:
        raise ConfigError("--hops must be at least 10")


def measure_host_hop(hops: int = DEFAULT_HOPS, cpus: tuple[int, int] | None = None) -> Hop:
    """Measure the hop on this machine (the snippet in a child Python).

    :param hops: moves to measure.
    :param cpus: the two CPUs, default the first two this process may use.
    :raises UnicacheError: if the child fails.
    """
    _check(hops)
    argv = [sys.executable, "-c", HOP_SNIPPET, str(hops)]
    if cpus is not None:
        argv += [str(cpus[0]), str(cpus[1])]
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=600)
    if proc.returncode != 0:
        raise UnicacheError(f"host hop measurement failed: {proc.stderr.strip()[-300:]}")
    return parse_hop("host", proc.stdout)


def measure_guest_hop(vm: str, hops: int = DEFAULT_HOPS) -> Hop:
    """Measure the hop between the first two vCPUs of a running guest (``unicache vm``).

    :param vm: the VM's name.
    :param hops: moves to measure.
    :raises UnicacheError: if the VM is not running or the guest cannot run the snippet.
    """
    _check(hops)
    from unicache.host.qemu import QemuVm

    res = QemuVm.attach(vm).run_in_guest(
        ["python3", "-c", HOP_SNIPPET, str(hops)], timeout=max(60.0, hops / 100)
    )
    if res.exit_code != 0:
        why = res.error or res.stderr.strip()[-300:] or f"exit {res.exit_code}"
        raise UnicacheError(f"guest {vm}: hop measurement failed: {why}")
    return parse_hop(f"guest {vm}", res.stdout)
