"""The MFC experiment's other load on the simulated machine: the observations paper's
co-runners, MFC §4.6's other users of the caches."""

from __future__ import annotations

import math

from unicache_sim import _native
from unicache_sim.engine.config import SimConfig
from unicache_sim.experiments.mfc.spec import MfcSpec

MIB = 1024 * 1024


class CoRunner:
    """The co-runner's endless work, one step per call."""

    #: bytes per step
    STEP = 1024 * 1024
    #: mergesort compute per byte (a comparison and a move per 64-byte record; an estimate)
    SORT_CYCLES_PER_BYTE = 0.5

    def __init__(self, kind: str, engine: _native.Engine, cfg: SimConfig) -> None:
        self.kind = kind
        self.engine = engine
        self.offset = 0
        if kind == "cachebuster":
            self.size = 4 * cfg.on_chip_bytes()
            self.regions = [engine.add_object(self.size)]
        elif kind == "mergesort":
            self.size = 16 * MIB
            self.regions = [engine.add_object(self.size), engine.add_object(self.size)]
        else:
            self.size = 0
            self.regions = []

    def step(self, tid: int) -> None:
        if self.kind == "spinloop":
            self.engine.push_compute(tid, 1e6)
            return
        length = min(self.STEP, self.size - self.offset)
        if self.kind == "cachebuster":
            self.engine.push_access(tid, self.regions[0], self.offset, length, "read", 0.0)
        else:
            # one merge step: read a slice of the source run, write it merged to the target
            src, dst = self.regions
            self.engine.push_access(
                tid, src, self.offset, length, "read", self.SORT_CYCLES_PER_BYTE
            )
            self.engine.push_access(tid, dst, self.offset, length, "write", 0.0)
        self.offset += length
        if self.offset >= self.size:
            self.offset = 0
            self.regions.reverse()


class Background:
    """The other users of the caches (MFC §4.6): per CPU, a footprint read every period."""

    def __init__(self, spec: MfcSpec, engine: _native.Engine, cfg: SimConfig) -> None:
        self.engine = engine
        self.size = spec.background_bytes
        self.period = spec.background_period_s * cfg.clock_ghz * 1e9
        on = self.size > 0 and self.period > 0
        self.objects = [engine.add_object(self.size, "node", n) for n in cfg.cpu_node] if on else []
        self.next = self.period if on else math.inf

    def run_until(self, now: float) -> None:
        """Read every CPU's footprint once per period elapsed up to ``now``.

        :param now: simulated time, cycles.
        """
        while self.next <= now:
            for cpu, obj in enumerate(self.objects):
                self.engine.touch(cpu, obj, 0, self.size, "read", self.next)
            self.next += self.period



