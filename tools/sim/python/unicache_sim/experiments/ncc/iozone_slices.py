"""How an iozone thread's records reach the engine: a thread's place in its test, and a
slice of its writes or reads pushed at a time, through the guest's page cache, shim and
agent (:mod:`~unicache_sim.experiments.ncc.iozone_guest`)."""

from __future__ import annotations

from dataclasses import dataclass

from unicache_sim import _native
from unicache_sim.experiments.ncc.iozone_guest import PAGE, GuestCache
from unicache_sim.guest.shimcost import SHIM_COST


@dataclass(slots=True)
class IozoneThread:
    """One iozone thread in one test.

    :param index: the thread's number, and its file's.
    :param order: the records of its file in the order the test accesses them.
    :param at: records of ``order`` done.
    :param last_end: the end offset of its last read (-1: none yet).
    """

    index: int
    order: list[int]
    at: int = 0
    last_end: int = -1


@dataclass(frozen=True, slots=True)
class Slices:
    """Pushes a thread's next slice of records into the engine, for one test.

    :param engine: the engine.
    :param guest: the guest's page cache, shim and agent.
    :param record: bytes per record.
    :param count: records per slice.
    :param compute: compute cycles per byte of the test.
    :param replicas: whether reads may be served by replicas.
    """

    engine: _native.Engine
    guest: GuestCache
    record: int
    count: int
    compute: float
    replicas: bool

    def writes(self, tid: int, th: IozoneThread, node: int) -> tuple[int, int]:
        """A slice of a thread's writes; returns (local pages, pages)."""
        guest, record = self.guest, self.record
        f = th.index
        obj = guest.objects[f]
        local = pages = 0
        for r in th.order[th.at : th.at + self.count]:
            off = r * record
            for page in range(off // PAGE, (off + record) // PAGE):
                local += guest.place(f, page, node) == node
                pages += 1
            guest.count_write(f, off)
            if self.replicas:  # the shim's write path (unicache_sim.guest.shimcost): as a read's
                self.engine.push_compute(tid, SHIM_COST.cycles(guest.table_state(f, off), record))
            self.engine.push_access(tid, obj, off, record, "write", self.compute)
        th.at += self.count
        return local, pages

    def reads(self, tid: int, th: IozoneThread, node: int) -> tuple[int, int]:
        """A slice of a thread's reads, each from the node's replica when the shim may
        serve it (filled first when the table lists one); returns (local pages, pages)."""
        engine, guest, record = self.engine, self.guest, self.record
        f = th.index
        obj = guest.objects[f]
        chunk = guest.chunk
        homes = guest.page_home[f]
        local = pages = 0
        per_record = record // PAGE
        for r in th.order[th.at : th.at + self.count]:
            off = r * record
            index = off // chunk
            # the shim's runs: a read continuing the thread's last one inside a chunk adds none
            guest.count_read(f, off, record, node, not (off == th.last_end and off % chunk))
            if self.replicas:  # what the shim adds to the call (unicache_sim.guest.shimcost)
                engine.push_compute(tid, SHIM_COST.cycles(guest.table_state(f, off), record))
            th.last_end = off + record
            pages += per_record
            replica = guest.replica_for(f, index, node) if self.replicas else None
            if replica is not None:
                engine.push_access(
                    tid, replica.obj, off - index * chunk, record, "read", self.compute
                )
                local += per_record
                continue
            if self.replicas and guest.want_fill(f, index, node):
                # the agent's fill: the chunk read from the primary, written to the node
                base = index * chunk
                length = min(chunk, guest.sizes[f] - base)
                filled = guest.fill(f, index, node)
                engine.push_access(tid, obj, base, length, "read", 0.0)
                engine.push_access(tid, filled, 0, length, "write", 0.0)
            engine.push_access(tid, obj, off, record, "read", self.compute)
            local += sum(
                1 for p in range(off // PAGE, off // PAGE + per_record) if homes[p] == node
            )
        th.at += self.count
        return local, pages
