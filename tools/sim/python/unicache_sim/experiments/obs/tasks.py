"""The observations paper's tasks as programs of the simulated machine: cachebuster,
spinloop and four SPEC CPU 2000 stand-ins, each run forever in a one-vCPU VM.

The paper ("Linux prototype results") pairs *cachebuster*, which "consumes as much cache
as possible as quickly as possible" and "deliberately modifies memory", with *spinloop*,
which "consumes CPU with a minimum of memory access" (the co-runner kinds of
:mod:`unicache_sim.experiments.mfc.corunners`, here sized to one LLC so that a cachebuster
alone keeps its data and two together thrash). Its SPEC mix is mcf (cache-heavy), swim
(medium), eon and sixtrack (light), "based largely on analyses by Zhao et al."
(CacheScouts, PACT 2007). The stand-ins below keep only that ordering: a footprint and an
access pattern per class, with compute per byte so that the weights order as the paper's
(mcf > swim > eon, sixtrack). Every size is a multiple of the machine's LLC group, so the
classes mean the same on every model. The figures are estimates, not measurements of
SPEC; the experiment compares policies on them, never their absolute speed.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Literal

from unicache.errors import ConfigError

from unicache_sim import _native
from unicache_sim.engine.config import SimConfig

KIB = 1024

#: how a program walks its footprint
Pattern = Literal["stream", "random", "none"]


@dataclass(frozen=True, slots=True)
class TaskKind:
    """One program of the mix.

    :param name: its name in the paper.
    :param llc_fraction: footprint as a fraction of one LLC group (0: no data).
    :param pattern: ``stream`` (in order, round and round), ``random`` (4 KiB blocks at
        random) or ``none`` (compute only).
    :param access: ``read`` or ``write`` (write-allocate).
    :param compute_per_byte: cycles of computation per byte touched (per step for
        ``none``: cycles of one step).
    :param cache_class: heavy, medium or light, as the paper classes it.
    """

    name: str
    llc_fraction: float
    pattern: Pattern
    access: Literal["read", "write"]
    compute_per_byte: float
    cache_class: str


#: the tasks (estimates; see the module docstring)
KINDS: dict[str, TaskKind] = {
    k.name: k
    for k in (
        # most of the LLC, written: alone it keeps its lines (a whole LLC's worth of random
        # frames would over-fill 4 sets in 10 and thrash even alone), two overflow it
        TaskKind("cachebuster", 0.75, "stream", "write", 0.0, "heavy"),
        TaskKind("spinloop", 0.0, "none", "read", 65_536.0, "light"),
        # mcf: pointer chasing over more than the LLC holds; what it keeps alone, a heavy
        # co-runner takes
        TaskKind("mcf", 1.5, "random", "read", 1.0, "heavy"),
        # swim: streams arrays larger than the LLC, with floating-point work per line
        TaskKind("swim", 2.0, "stream", "read", 1.5, "medium"),
        # eon, sixtrack: small working sets (L2-resident), compute-bound
        TaskKind("eon", 0.0625, "random", "read", 6.0, "light"),
        TaskKind("sixtrack", 0.02, "stream", "read", 8.0, "light"),
    )
}
#: the SPEC CPU 2000 mix of "Linux prototype results" (two instances each on two cores)
SPEC_MIX = ("mcf", "eon", "sixtrack", "swim")


class Program:
    """A task's endless work, one step at a time, and the work it has done.

    :param kind: the task.
    :param engine: the engine.
    :param cfg: the machine.
    :param rng: the task's random source (block order of ``random`` tasks).
    """

    #: bytes per step of a memory task
    STEP = 32 * KIB
    #: bytes of a random block
    BLOCK = 4 * KIB

    def __init__(
        self, kind: TaskKind, engine: _native.Engine, cfg: SimConfig, rng: random.Random
    ) -> None:
        self.kind = kind
        self.engine = engine
        self.rng = rng
        llc = cfg.levels[-1]
        llc_bytes = llc.sets * llc.ways * cfg.line_size
        size = int(kind.llc_fraction * llc_bytes) // self.BLOCK * self.BLOCK
        if kind.pattern != "none" and size < self.STEP:
            raise ConfigError(f"{kind.name}: footprint {size} B is below one step")
        self.size = size
        self.obj = engine.add_object(size, "node", 0) if size else -1
        self.offset = 0

    def step(self, tid: int) -> float:
        """Queue the next step of thread ``tid``.

        :returns: the work it stands for (bytes, or compute cycles for ``none``).
        """
        kind = self.kind
        if kind.pattern == "none":
            self.engine.push_compute(tid, kind.compute_per_byte)
            return kind.compute_per_byte
        if kind.pattern == "stream":
            length = min(self.STEP, self.size - self.offset)
            self.engine.push_access(
                tid, self.obj, self.offset, length, kind.access, kind.compute_per_byte
            )
            self.offset = (self.offset + length) % self.size
            return float(length)
        blocks = self.size // self.BLOCK
        for _ in range(self.STEP // self.BLOCK):
            offset = self.rng.randrange(blocks) * self.BLOCK
            self.engine.push_access(
                tid, self.obj, offset, self.BLOCK, kind.access, kind.compute_per_byte
            )
        return float(self.STEP)


def kind_of(name: str) -> TaskKind:
    """The task of a name.

    :raises ConfigError: naming the known tasks.
    """
    try:
        return KINDS[name]
    except KeyError as err:
        raise ConfigError(f"unknown task {name!r}; known: {', '.join(KINDS)}") from err
