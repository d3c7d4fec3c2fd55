"""The synthetic fleet ``unicache bench policy`` feeds to the policy round.

A host of ``vms`` VMs whose guests, together, have ``chunks`` chunks that SCU tracks. The
load is defined so that nobody can read a flattering figure into it without saying so:

* **chunks**: each VM owns ``chunks / vms`` chunks (files of ``FILE_CHUNKS`` chunks,
  opaque random 64-bit file ids); SCU's table starts holding every one of them, each with
  a use count no aging empties before the timed rounds end (the daemon's restored state,
  :meth:`unicache.policy.scu.mfc.MfcTable.restore_chunk`), so every timed round runs over
  ``chunks`` tracked chunks;
* **activity across VMs**: Zipf (exponent ``zipf_s``) over a random ranking of the VMs: a
  round's chunk records go to VM ``v`` with probability proportional to
  ``1 / rank(v) ** zipf_s`` (a few busy VMs, a long tail of quiet ones; every VM sends a
  report every round, most with few records);
* **records per round**: ``changed_fraction * chunks`` chunk records in all, each a chunk
  the VM read this interval; which chunks: Zipf (``zipf_s``) over the VM's own chunks
  (the hottest read again every round, the tail rarely);
* **a record**: 1-3 read runs of the whole chunk by one or two of the VM's vCPUs; a VM of
  ``NUMA_EVERY`` has two guest NUMA nodes (NCC replicates for it: the record names a home
  node and reads per node) and one of ``COLOR_EVERY`` a colored guest node (SRM colors its
  streams);
* **counter samples**: one per vCPU per round, software events as on this machine (busy
  share, task clock, guest bytes: OBS's cache weight comes from the guest's bytes);
* **replicas at their bound**: NCC starts as a long-running daemon's would, each
  two-node VM holding a replica of every one of its chunks on each of its nodes, up to
  the node's capacity (``max_replicas_per_node`` under the agent's budget), each read
  once (:meth:`SyntheticFleet.seed_replicas`): the state a VM's NCC round costs most
  with, which rounds from an empty state reach only after thousands of rounds;
* **pins take effect**: a vCPU pinned by a round's ``PinVcpu`` has that affinity, and
  runs on its first CPU, in the next round's observation (:meth:`SyntheticFleet.apply`),
  as on a host that applies the round's actions (a host that applied nothing would be
  asked to pin every vCPU again every round).

Deterministic from ``seed``.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass, replace

from unicache.model import (
    ChunkAccess,
    ChunkId,
    CounterSample,
    CounterSource,
    GuestNode,
    GuestReport,
    Observation,
    PinVcpu,
    Vcpu,
    VcpuId,
    Vm,
)
from unicache.policy.ncc.cache import NccParams, NccState, Replica, ReplicaKey
from unicache.policy.ncc.memory import budgeted
from unicache.policy.ncc.replicas import ReplicaState, VmReplicas
from unicache.policy.scu.mfc import MfcTable
from unicache.policy.scu.mfc_state import ChunkKey, ChunkState

#: chunks per synthetic file
FILE_CHUNKS = 8
#: every this many VMs, one has two guest NUMA nodes (NCC runs for it)
NUMA_EVERY = 10
#: every this many VMs, one (offset by half) has a colored guest node (SRM runs for it)
COLOR_EVERY = 10
#: guest memory of a synthetic VM
VM_MEMORY = 4 << 30
#: the report interval, seconds (the daemon's default)
INTERVAL_S = 1.0


@dataclass(frozen=True, slots=True)
class LoadSpec:
    """The synthetic load (module docstring).

    :param vms: VMs on the host.
    :param chunks: tracked chunks, over all VMs.
    :param vcpus: vCPUs per VM.
    :param changed_fraction: chunk records per round, as a fraction of ``chunks``.
    :param zipf_s: Zipf exponent of VM activity and of chunk popularity inside a VM.
    :param seed: the random seed.
    """

    vms: int
    chunks: int
    vcpus: int = 2
    changed_fraction: float = 0.005
    zipf_s: float = 1.0
    seed: int = 1

    @property
    def records_per_round(self) -> int:
        """Chunk records in one round's reports, over all VMs."""
        return max(1, round(self.changed_fraction * self.chunks))


class SyntheticFleet:
    """The VMs, their chunks, and one observation per round.

    :param spec: the load.
    :param cpus: the host's CPUs (the vCPUs' starting affinity).
    :param chunk_size: SCU's chunk size (a record reads whole chunks).
    """

    def __init__(self, spec: LoadSpec, cpus: frozenset[int], chunk_size: int) -> None:
        self.spec = spec
        self.chunk_size = chunk_size
        self.rng = random.Random(spec.seed)
        self.vms = tuple(self._vm(i, cpus) for i in range(spec.vms))
        per_vm = max(1, spec.chunks // spec.vms)
        self.chunks_of: dict[str, list[ChunkId]] = {}
        for vm in self.vms:
            files = [self.rng.getrandbits(64) for _ in range(-(-per_vm // FILE_CHUNKS))]
            self.chunks_of[vm.name] = [
                ChunkId(files[i // FILE_CHUNKS], i % FILE_CHUNKS) for i in range(per_vm)
            ]
        ranks = list(range(1, spec.vms + 1))
        self.rng.shuffle(ranks)
        self.vm_weights = [1.0 / r**spec.zipf_s for r in ranks]
        self.chunk_weights = _cumulative([1.0 / (i + 1) ** spec.zipf_s for i in range(per_vm)])

    def _vm(self, i: int, cpus: frozenset[int]) -> Vm:
        name = f"vm{i:05d}"
        vcpus = tuple(Vcpu(VcpuId(name, k), None, cpus) for k in range(self.spec.vcpus))
        nodes: tuple[GuestNode, ...] = ()
        half = VM_MEMORY // 2
        if i % NUMA_EVERY == 0:
            split = max(1, self.spec.vcpus // 2)
            nodes = (
                GuestNode(0, frozenset(range(split)), half),
                GuestNode(1, frozenset(range(split, self.spec.vcpus)), half),
            )
        elif i % COLOR_EVERY == COLOR_EVERY // 2:
            nodes = (
                GuestNode(0, frozenset(range(self.spec.vcpus)), half),
                GuestNode(1, frozenset(), half, frozenset({0, 1})),
            )
        return Vm(name, vcpus, VM_MEMORY, nodes)

    def apply(self, pins: Iterable[PinVcpu]) -> None:
        """The pins of a round, in effect from the next observation on (the vCPU runs on
        the first CPU of its new set)."""
        by_vm: dict[str, dict[int, PinVcpu]] = {}
        for pin in pins:
            by_vm.setdefault(pin.vcpu.vm, {})[pin.vcpu.index] = pin
        if not by_vm:
            return
        vms = []
        for vm in self.vms:
            mine = by_vm.get(vm.name)
            if mine is None:
                vms.append(vm)
                continue
            vcpus = tuple(
                v
                if v.id.index not in mine
                else replace(v, cpus=mine[v.id.index].cpus, cpu=min(mine[v.id.index].cpus))
                for v in vm.vcpus
            )
            vms.append(replace(vm, vcpus=vcpus))
        self.vms = tuple(vms)

    def seed_replicas(self, params: NccParams, chunk_size: int) -> ReplicaState:
        """NCC's state with every two-node VM's replicas at their bound: a replica of each
        of its chunks on each node, at most the node's capacity (the agent's budget)."""
        vms = []
        for vm in sorted(self.vms, key=lambda v: v.name):
            if len(vm.nodes) != 2 or vm.nodes[1].colors:
                continue
            cap = budgeted(params, (n.memory_bytes for n in vm.nodes), chunk_size)
            held = self.chunks_of[vm.name][: cap.max_replicas_per_node]
            replicas = sorted(
                Replica(ReplicaKey(vm.name, chunk), node.node, 1, 0)
                for chunk in held
                for node in vm.nodes
            )
            vms.append(VmReplicas(vm.name, NccState(replicas=tuple(replicas))))
        return ReplicaState(tuple(vms))

    def seed_table(self, table: MfcTable, use: int) -> int:
        """Put every chunk of every VM in ``table``, uncached, with ``use`` uses on the unit
        of its VM's first vCPU's number (the daemon's restore path); returns the count."""
        units = sorted(table.units)
        for n, vm in enumerate(self.vms):
            unit = units[n % len(units)]
            for chunk in self.chunks_of[vm.name]:
                table.restore_chunk(
                    ChunkKey(vm.name, chunk), ChunkState(self.chunk_size, use_pairs=(unit, use))
                )
        return len(table.chunks)

    def observation(self, tick: int) -> Observation:
        """Round ``tick``'s observation: every VM's report and every vCPU's sample."""
        rng = self.rng
        counts = [0] * len(self.vms)
        for i in rng.choices(range(len(self.vms)), self.vm_weights, k=self.spec.records_per_round):
            counts[i] += 1
        reports = []
        samples = []
        for vm, count in zip(self.vms, counts, strict=True):
            records = self._records(vm, count)
            reports.append(
                GuestReport(
                    vm.name,
                    tick,
                    INTERVAL_S,
                    records,
                    len(vm.vcpus),
                    tuple(n.node for n in vm.nodes),
                )
            )
            read = {v.id.index: 0 for v in vm.vcpus}
            for record in records:
                for index, nbytes in record.vcpu_bytes:
                    read[index] += nbytes
            for v in vm.vcpus:
                busy = min(1.0, 0.01 + read[v.id.index] / 2e9 + rng.random() * 0.05)
                samples.append(
                    CounterSample(
                        v.id,
                        CounterSource.SOFTWARE,
                        busy=busy,
                        guest_bytes=read[v.id.index],
                        task_clock_ns=int(busy * INTERVAL_S * 1e9),
                    )
                )
        return Observation(tick, self.vms, tuple(samples), tuple(reports))

    def _records(self, vm: Vm, count: int) -> tuple[ChunkAccess, ...]:
        if count == 0:
            return ()
        rng = self.rng
        mine = self.chunks_of[vm.name]
        picked = {
            mine[i] for i in rng.choices(range(len(mine)), cum_weights=self.chunk_weights, k=count)
        }
        numa = len(vm.nodes) == 2 and not vm.nodes[1].colors
        out = []
        for chunk in sorted(picked):
            reads = rng.randint(1, 3)
            readers = sorted(
                rng.sample(range(len(vm.vcpus)), min(len(vm.vcpus), rng.randint(1, 2)))
            )
            nbytes = self.chunk_size * reads
            share = nbytes // len(readers)
            vcpu_bytes = tuple((r, share) for r in readers)
            home = -1
            node_reads: tuple[tuple[int, int], ...] = ()
            if numa:
                home = rng.randint(0, 1)
                node_reads = tuple(sorted({vm.node_of_vcpu(r): reads for r in readers}.items()))
            out.append(ChunkAccess(chunk, nbytes, reads, 0, vcpu_bytes, home, node_reads))
        return tuple(out)


def _cumulative(weights: list[float]) -> list[float]:
    out = []
    total = 0.0
    for w in weights:
        total += w
        out.append(total)
    return out
