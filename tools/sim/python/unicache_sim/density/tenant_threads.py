"""The density experiment's guest threads: a latency tenant's request server or a batch
job on each vCPU of a VM (:mod:`unicache_sim.density.tenants` says what each flavor runs), and the
files each VM's data lives in.

A request's latency runs from its arrival (a Poisson process per vCPU) to its last byte,
queueing included; batch threads run without pause. Every random draw is seeded by (seed,
VM, vCPU), so both policies see the same requests at the same times.
"""

from __future__ import annotations

import bisect
import random
from dataclasses import dataclass, field
from functools import cache

from unicache.model import ChunkId

from unicache_sim import _native
from unicache_sim.density.tenants import Flavor, Kind, Workload
from unicache_sim.guest.multihost import MultiHost
from unicache_sim.guest.opensample import COUNTED_WHOLE, OpenFile
from unicache_sim.guest.shim import GuestShim
from unicache_sim.guest.simhost import SimHost

MIB = 1024 * 1024
#: bytes a batch thread moves per step (the simulator's co-runners' step)
BATCH_STEP = 1 * MIB
#: mergesort compute per byte (as the mergesort co-runner)
SORT_CYCLES_PER_BYTE = 0.5
#: the odd multiplier that scatters Zipf ranks over a store's slots (Knuth's 2^32 / phi)
_SCATTER = 2_654_435_761


@dataclass(slots=True)
class TenantVm:
    """One VM on the simulated host."""

    name: str
    flavor: Flavor
    host: SimHost
    #: per vCPU, the node its memory comes from
    nodes: dict[int, int]
    objects: list[int] = field(default_factory=list)
    #: the chunks its reads named so far, one value each: a read names the same object
    #: (no new value per read, and the shim's lookups compare by identity)
    chunk_ids: dict[tuple[int, int], ChunkId] = field(default_factory=dict)


@cache
def zipf_cdf(n: int) -> tuple[float, ...]:
    acc = 0.0
    out = []
    for k in range(1, n + 1):
        acc += 1.0 / k
        out.append(acc)
    return tuple(c / acc for c in out)


class Worker:
    """One guest thread: a latency tenant's request server, or a batch job."""

    def __init__(
        self,
        vm: TenantVm,
        vcpu: int,
        tid: int,
        rate_hz: float,
        hz: float,
        seed: int,
    ) -> None:
        self.vm = vm
        self.vcpu = vcpu
        self.tid = tid
        self.rng = random.Random(f"{seed}:{vm.name}:{vcpu}")
        #: arrivals per cycle (0: closed loop)
        self.rate = rate_hz / hz
        self.next_arrival = self.rng.expovariate(self.rate) if self.rate > 0 else 0.0
        #: arrival time of the request in service (None: asleep or batch)
        self.serving: float | None = None
        #: (arrival, latency) of completed requests, cycles
        self.done: list[tuple[float, float]] = []
        self.offset = 0
        self.sleeping = False
        #: its VM's guest shim (None: no shim; set by :meth:`Tenants.start`)
        self.shim: GuestShim | None = None
        # what every request of the flavor needs, worked out once (the hot path reads it)
        work = vm.flavor.workload
        self.work = work
        self.files = work.kind is Kind.FILES
        self.whole = work.access == "whole"
        #: random reads: the aligned read offsets of one file (0: no read size)
        self.per_file = work.file_bytes // work.read_bytes if work.read_bytes else 0
        #: the bytes of one read call of a whole read (the program's buffer, else a chunk)
        self.buffer = work.read_bytes if self.whole else 0
        #: files (whole reads) or slots (random reads) a request picks from
        self.choices = work.files if self.whole else _slots(work)
        #: the Zipf CDF over the choices (None: uniform)
        self.zipf = zipf_cdf(self.choices) if self.files and work.popularity == "zipf" else None


class Tenants:
    """Issues every thread's work on the engine (requests, batch steps)."""

    def __init__(
        self,
        engine: _native.Engine,
        multihost: MultiHost,
        shims: dict[str, GuestShim] | None,
        chunk: int,
    ) -> None:
        self.engine = engine
        self.multihost = multihost
        self.shims = shims
        self.chunk = chunk

    def start(self, w: Worker) -> None:
        """The thread's first work at time 0."""
        w.shim = self.shims.get(w.vm.name) if self.shims is not None else None
        if w.vm.flavor.workload.kind is not Kind.FILES:
            self._batch_step(w)
        elif w.rate > 0:
            w.sleeping = True
            self.engine.push_sleep(w.tid, w.next_arrival)
        else:
            self._request(w, 0.0)

    def need(self, w: Worker, now: float) -> None:
        """The thread finished what it was given at ``now`` (cycles)."""
        if not w.files:
            self._batch_step(w)
            return
        if w.sleeping:  # woke for the request it slept for
            w.sleeping = False
            self.multihost.wake(w.tid)
            self._request(w, w.next_arrival)
            w.next_arrival += w.rng.expovariate(w.rate)
            return
        serving = w.serving
        if serving is not None:
            w.done.append((serving, now - serving))
            w.serving = None
        if w.rate <= 0:
            self._request(w, now)
        elif w.next_arrival <= now:  # queued while it served the last one
            self._request(w, w.next_arrival)
            w.next_arrival += w.rng.expovariate(w.rate)
        else:
            w.sleeping = True
            self.engine.push_sleep(w.tid, w.next_arrival)
            # its CPU may have nothing left to run: CFS's newly idle balance
            self.multihost.idle(self.engine.thread_cpu(w.tid))

    def _request(self, w: Worker, arrival: float) -> None:
        work = w.work
        w.serving = arrival
        if work.cycles_per_request > 0:
            self.engine.push_compute(w.tid, work.cycles_per_request)
        n = w.choices
        if w.zipf is not None:
            rank = min(bisect.bisect_left(w.zipf, w.rng.random()), n - 1)
        else:
            rank = w.rng.randrange(n)
        if w.whole:
            # a file served whole is opened for the request (the shim counts it or skips
            # it); a store read at random offsets stays open, as a database keeps it
            shim = w.shim
            opened = shim.open_file(w.tid, rank, work.file_bytes) if shim else COUNTED_WHOLE
            self._read(w, rank, 0, work.file_bytes, opened)
            return
        slot = rank * _SCATTER % n  # hot keys scattered over the store, as a hash does
        per_file, length = w.per_file, work.read_bytes
        self._read(w, slot // per_file, (slot % per_file) * length, length, COUNTED_WHOLE)

    def _read(self, w: Worker, file: int, start: int, length: int, opened: OpenFile) -> None:
        # once per read call: names looked up once per request (the driver's hot path)
        work, tid, shim, chunk = w.work, w.tid, w.shim, self.chunk
        obj = w.vm.objects[file]
        buffer = w.buffer or chunk
        compute, file_bytes = work.cycles_per_byte, work.file_bytes
        push_access, chunk_ids = self.engine.push_access, w.vm.chunk_ids
        offset, end = start, start + length
        while offset < end:
            index = offset // chunk
            size = min(buffer, (index + 1) * chunk - offset, end - offset)
            if shim is None:
                push_access(tid, obj, offset, size, "read", compute)
            else:
                chunk_id = chunk_ids.get((file, index))
                if chunk_id is None:
                    chunk_id = chunk_ids[file, index] = ChunkId(file, index)
                shim.read_chunk(tid, obj, chunk_id, offset, size, compute, file_bytes, opened)
            offset += size

    def _batch_step(self, w: Worker) -> None:
        work = w.vm.flavor.workload
        if work.kind is Kind.IDLE:
            return
        if work.kind is Kind.STREAM:
            region = w.vm.objects[w.vcpu]
            size = work.size_bytes // w.vm.flavor.vcpus
            length = min(BATCH_STEP, size - w.offset)
            self.engine.push_access(w.tid, region, w.offset, length, "read", 0.0)
        else:
            src, dst = w.vm.objects[2 * w.vcpu], w.vm.objects[2 * w.vcpu + 1]
            if (w.offset // work.size_bytes) % 2:
                src, dst = dst, src
            size = work.size_bytes
            at = w.offset % size
            length = min(BATCH_STEP, size - at)
            self.engine.push_access(w.tid, src, at, length, "read", SORT_CYCLES_PER_BYTE)
            self.engine.push_access(w.tid, dst, at, length, "write", 0.0)
            w.offset += length
            return
        w.offset = (w.offset + length) % size


def _slots(work: Workload) -> int:
    """The aligned read offsets of a store (``random`` reads; 0 without reads)."""
    return work.files * (work.file_bytes // work.read_bytes) if work.read_bytes else 0


def add_data(engine: _native.Engine, vm: TenantVm) -> None:
    """The VM's files or buffers, each page on the node of the vCPU that wrote it."""
    work = vm.flavor.workload
    vcpus = vm.flavor.vcpus
    if work.kind is Kind.FILES:
        # file j written by vCPU j mod vcpus (first touch: on that vCPU's memory node)
        vm.objects = [
            engine.add_object(work.file_bytes, "node", vm.nodes[j % vcpus])
            for j in range(work.files)
        ]
    elif work.kind is Kind.STREAM:
        share = work.size_bytes // vcpus
        vm.objects = [engine.add_object(share, "node", vm.nodes[v]) for v in range(vcpus)]
    elif work.kind is Kind.MERGESORT:
        vm.objects = [
            engine.add_object(work.size_bytes, "node", vm.nodes[v])
            for v in range(vcpus)
            for _ in range(2)
        ]
