"""The guest's shim in the simulated guest: libunicache's read path on a :class:`SimHost`.

``GuestShim`` is what libunicache does on every read: look the chunk up in the last
published table, let the shim's rule (``uc_decide.c``, mirrored by
:mod:`unicache_sim.guest.shimrule`) pick the vCPU the read runs on (stay, or move to the chunk's
home vCPU or the next one no other reader claims, within the entry's migration budget per
round), settle the claims, then read with caching or non-temporal loads; each call first
pays what the real shim adds to it (:mod:`unicache_sim.guest.shimcost`).

A program that opens a file (:meth:`GuestShim.open_file`) has the shim decide, when its
fstat names the file, whether it counts the file and at what scale (the agent's per-open
sampling, :mod:`unicache_sim.guest.opensample`), and pays the shim's per-file work; the
calls on a file it skips pass straight through, as the calls of a guest without the shim.
"""

from __future__ import annotations

import random
from typing import Literal

from unicache.model import ChunkId

from unicache_sim.guest import opensample, shimrule
from unicache_sim.guest.opensample import AGENT_OPEN_SAMPLE, COUNTED_WHOLE, OpenFile
from unicache_sim.guest.shimcost import SHIM_COST, ShimCost
from unicache_sim.guest.simhost import SimHost


class GuestShim:
    """libunicache's read path in the simulated guest (``uc_pre`` and ``uc_maybe_migrate``).

    Every thread could use every vCPU when the shim loaded (the rule's ``allowed``); the
    claims are the guest's one :class:`~unicache_sim.guest.shimrule.ClaimTable`, a word per
    vCPU, and the budgets start again with each report, as the agent's harvest resets the
    shim's per-chunk migration counts. Each call pays what the real shim adds to it
    (:mod:`~unicache_sim.guest.shimcost`: by what the table says of the chunk, and the call's
    size), before its read; each open, the shim's per-file work (:meth:`open_file`).

    :param host: the simulated host (its table is the guest's view).
    :param cost: the shim's cost per call (default: the shipped calibration,
        :data:`SHIM_COST`, as this module holds it when the shim is made).
    :param sample: which opens the published tables sample (default: the agent's,
        :data:`~unicache_sim.guest.opensample.AGENT_OPEN_SAMPLE`: every open).
    :param seed: the run's seed; the opens' draws are seeded by it and the VM, apart from
        the run's other draws, so the same run draws the same and the workload's own
        draws do not depend on the sampling.
    """

    def __init__(
        self,
        host: SimHost,
        cost: ShimCost | None = None,
        sample: opensample.OpenSample = AGENT_OPEN_SAMPLE,
        seed: int = 0,
    ) -> None:
        self.host = host
        self.cost = cost if cost is not None else SHIM_COST
        self.sample = sample
        self._draws = random.Random(f"opens:{seed}:{host.vm}")
        self.claims = shimrule.ClaimTable(host.n_vcpus)
        self._allowed = (1 << host.n_vcpus) - 1  # every vCPU
        self._spent: dict[ChunkId, int] = {}
        self._spent_tick = -1
        #: threads the shim moved: each is pinned to one vCPU (``uc_pinned``)
        self._pinned: set[int] = set()
        #: per thread, (chunk, end offset) of its last read (``uc_seq_file``, ``uc_seq_end``)
        self._seq: dict[int, tuple[ChunkId, int]] = {}

    def open_file(self, tid: int, file: int, file_bytes: int, read_only: bool = True) -> OpenFile:
        """Thread ``tid`` opens a file and the program's fstat names it: whether the shim
        counts it, and at what scale (:func:`~unicache_sim.guest.opensample.decide`: the
        sample, and the files the last published table names), the thread charged the
        shim's per-file work (:meth:`~unicache_sim.guest.shimcost.ShimCost.open_cycles`).

        :param file: the file's id (its chunks' ``file_id``).
        :param file_bytes: its size.
        :param read_only: opened ``O_RDONLY``.
        """
        host = self.host
        # one draw per open whatever the rule needs: the draws do not depend on the table
        draw = self._draws.random()
        # the sample applies before the host's first table too: the agent publishes an
        # empty table with it as it starts (unicache_agent.agent: counting starts at once)
        named = file in host.named_files
        opened = opensample.open_file(
            opensample.decide(file_bytes, read_only, named, draw, self.sample)
        )
        host.engine.push_compute(tid, self.cost.open_cycles(opened.counted, file_bytes))
        return opened

    def read_chunk(
        self,
        tid: int,
        obj: int,
        chunk: ChunkId,
        offset: int,
        length: int,
        compute: float,
        file_bytes: int,
        opened: OpenFile = COUNTED_WHOLE,
    ) -> None:
        """Queue one read call of thread ``tid`` inside one chunk (``length`` bytes at file
        offset ``offset`` of a file of ``file_bytes``): run it where the rule says.

        :param opened: what :meth:`open_file` decided of the file (default: counted whole,
            as a file the program keeps open is); a skipped file's call is its read alone.
        """
        host = self.host
        if not opened.counted:  # straight to libc: no count, no table, no cost, no rule
            host.engine.push_access(tid, obj, offset, length, "read", compute)
            return
        seq = self._seq
        previous = seq.get(tid)
        seq[tid] = (chunk, offset + length)
        # a read continuing the thread's previous one inside the chunk is the same run
        host.record_read(tid, chunk, length, previous != (chunk, offset), opened.scale)
        table = host.table
        if table is not None and not host.homes and tid in self._pinned:
            # a table that sends no chunk to a vCPU (SCU left the VM alone; colors and
            # replicas may stay): the thread gets its own CPUs back (``uc_unpin``) and the
            # guest's scheduler spreads it again
            self._unpin(tid)
        entry = host.entries.get(chunk) if table is not None else None
        state = "none" if table is None else "unplaced" if entry is None else "placed"
        host.engine.push_compute(tid, self.cost.cycles(state, length))
        kind: Literal["read", "nt"] = "read"
        if entry is not None and table is not None:
            prev_end = shimrule.NO_PREVIOUS_END
            if previous is not None and previous[0].file_id == chunk.file_id:
                prev_end = previous[1]
            # a sequential reader counts the rest of the chunk (uc_span)
            span = length
            if length < table.min_read_size:
                span = shimrule.read_span(
                    length,
                    offset,
                    table.chunk_size,
                    file_bytes,
                    prev_end,
                )
            # MFC Figure 2 lines 3-4: reads below min_read_size always use caching loads
            if not entry.caching and span >= table.min_read_size:
                kind = "nt"
            self._place(tid, entry.vcpus, entry.migration_budget, chunk, span, table.min_read_size)
        elif table is not None and tid in self._pinned:
            # a pinned thread reading an unplaced chunk: any vCPU it may use, no budget, no
            # min_read_size (a move for CPU, not for data)
            self._place(tid, self._allowed, shimrule.BUDGET_UNLIMITED, chunk, length, 0)
        host.engine.push_access(tid, obj, offset, length, kind, compute)

    def _unpin(self, tid: int) -> None:
        """``uc_unpin``: the thread is no longer pinned; the guest's scheduler balances the
        runnable threads over the vCPUs, modelled as its return to the vCPU it was spread to
        (a move between vCPUs costs what the shim's moves cost)."""
        host = self.host
        self._pinned.discard(tid)
        src, dst = host.thread_vcpu[tid], host.spread_vcpu[tid]
        if src != dst:
            host.thread_vcpu[tid] = dst
            cost = host.cfg.migration_cost(host.vcpu_cpu[src], host.vcpu_cpu[dst])
            host.engine.push_migrate(tid, host.vcpu_cpu[dst], cost)

    def _place(
        self,
        tid: int,
        vcpus: shimrule.VcpuMaskT,
        budget: int,
        chunk: ChunkId,
        length: int,
        min_read_size: int,
    ) -> None:
        host = self.host
        if self._spent_tick != host.tick:
            self._spent = {}
            self._spent_tick = host.tick
        reader = tid + 1  # claim words name threads 1..CLAIM_TID_MAX
        now_ns = int(host.engine.thread_time(tid) / host.cfg.clock_ghz)
        spent = self._spent.get(chunk, 0)
        decision = shimrule.decide(
            n=length,
            min_read_size=min_read_size,
            cur=host.thread_vcpu[tid],
            mask=vcpus,
            allowed=self._allowed,
            file_id=chunk.file_id,
            chunk=chunk.index,
            budget=budget,
            spent=spent,
            claims=self.claims,
            tid=reader,
            now_ns=now_ns,
        )
        if decision.action is shimrule.Action.NONE:
            return
        if decision.action is shimrule.Action.MIGRATE:
            self._spent[chunk] = spent + 1
            src = host.vcpu_cpu[host.thread_vcpu[tid]]
            dst = host.vcpu_cpu[decision.vcpu]
            host.thread_vcpu[tid] = decision.vcpu
            host.engine.push_migrate(tid, dst, host.cfg.migration_cost(src, dst))
            self._pinned.add(tid)
        self.claims.settle(decision, reader, now_ns)
