"""The host's CPU sharing for vCPU threads that never sleep: CFS timeslices, weighted as
the daemon's weight backends weight them.

The observations paper's tasks always run (cachebuster, spinloop, SPEC in a loop), more
of them than CPUs, so which tasks run *at the same time* on the cores of one LLC is what
its policies change. :class:`SlicedHost` runs the vCPU threads of a
:class:`~unicache_sim.guest.multihost.MultiHost` in timeslices: in each slice every CPU runs
one vCPU of its run queue (the vCPUs whose CPU it is) and the others wait, the one with
the smallest virtual runtime first, as CFS picks (``pick_next_entity``); a vCPU that ran
``t`` cycles ages by ``t * NICE_0_LOAD / w``, ``w`` its weight.

Weights are what the daemon's backends make of OBS-C's ``SetCpuWeight`` (a vCPU's
``cpu.weight`` around :data:`~unicache.policy.obs.credit.BASE_CPU_WEIGHT`), flattened
from the cgroup hierarchy CFS schedules (a group's share on a CPU is its shares times its
load there over its load everywhere, ``calc_group_shares``):

* ``cgroup`` (:mod:`unicache.host.linux.cgroup`, unicache's own QEMU): each vCPU thread
  in ``unicache/<vm>/vcpuN`` with the weight, under a VM cgroup left at the default
  weight, so a vCPU weighs ``NICE_0_LOAD * w_vcpu / sum(w of its VM's vCPUs)``: the
  credit moves CPU time between the vCPUs of one VM only;
* ``libvirt`` (:mod:`unicache.host.libvirt.weights`): the domain's ``cpu_shares`` carry
  the mean of its vCPUs' weights (:func:`~unicache.host.libvirt.weights.domain_shares`,
  from libvirt's default 1024), shared equally by its vCPUs.

Pinning is the daemon's as :class:`MultiHost` applies it (``PinVcpu`` narrows a vCPU's
CPU set, ``ReleaseVcpu`` restores it); a vCPU moved to another CPU keeps its lag behind
the queue it leaves (``min_vruntime`` normalisation), as CFS migrates a task.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Literal

from unicache.host.libvirt.weights import domain_shares
from unicache.host.ports import ActResult
from unicache.model import Action, Observation, SetCpuWeight, VcpuId
from unicache.policy.obs.credit import BASE_CPU_WEIGHT

from unicache_sim.guest.multihost import MultiHost
from unicache_sim.guest.simhost import SimHost

#: CFS's weight of a nice-0 task (``NICE_0_LOAD``, scaled down as the kernel reports it)
NICE_0_LOAD = 1024
#: libvirt's ``cpu_shares`` of a domain nobody changed (cgroup v1 ``cpu.shares`` default)
LIBVIRT_DEFAULT_SHARES = 1024
#: the daemon's backends for ``SetCpuWeight``
WeightBackend = Literal["cgroup", "libvirt"]
WEIGHT_BACKENDS: tuple[WeightBackend, ...] = ("cgroup", "libvirt")


def flat_weights(
    vcpus_of: Mapping[str, Sequence[VcpuId]],
    cpu_weight: Mapping[VcpuId, int],
    backend: WeightBackend,
) -> dict[VcpuId, float]:
    """Each vCPU's CFS weight against every other runnable vCPU, by backend.

    :param vcpus_of: every VM's vCPUs.
    :param cpu_weight: the ``cpu.weight`` OBS-C set per vCPU (missing: the base weight).
    :param backend: how the daemon applies them.
    :returns: per vCPU, the weight of its thread in its CPU's run queue.
    """
    out: dict[VcpuId, float] = {}
    for vcpus in vcpus_of.values():
        leaf = [cpu_weight.get(v, BASE_CPU_WEIGHT) for v in vcpus]
        if backend == "cgroup":
            total = sum(leaf)
            for vcpu, w in zip(vcpus, leaf, strict=True):
                out[vcpu] = NICE_0_LOAD * w / total
        else:
            shares = domain_shares(LIBVIRT_DEFAULT_SHARES, leaf)
            for vcpu in vcpus:
                out[vcpu] = shares / len(vcpus)
    return out


class SlicedHost:
    """A :class:`MultiHost` whose vCPU threads always run, in weighted timeslices.

    This host decides who runs when (:meth:`begin_slice`, :meth:`end_slice`); the caller
    feeds the vCPUs that run their programs in between. It is the Host port of the
    daemon's loop: ``observe`` and ``act`` are :class:`MultiHost`'s, and ``act`` takes the
    ``SetCpuWeight`` actions too.

    :param multihost: the VMs (one thread per vCPU, registered with ``add_thread``).
    :param backend: how ``SetCpuWeight`` is applied (:data:`WEIGHT_BACKENDS`).
    :param slice_cycles: the length of a timeslice.
    :param vruntime: each vCPU's virtual runtime at the start (CFS places a new task at
        its queue's ``min_vruntime``; a spread of starts gives the slices a phase).
    """

    name = "sim"

    def __init__(
        self,
        multihost: MultiHost,
        backend: WeightBackend,
        slice_cycles: float,
        vruntime: Mapping[VcpuId, float] | None = None,
    ) -> None:
        self.multihost = multihost
        self.slice_cycles = slice_cycles
        self.engine = multihost.engine
        self.backend = backend
        #: vCPU -> (its host, its index, its thread)
        self._where: dict[VcpuId, tuple[SimHost, int, int]] = {}
        for tid, host in sorted(multihost.host_of.items()):
            vcpu = host.thread_vcpu[tid]
            self._where[VcpuId(host.vm, vcpu)] = (host, vcpu, tid)
        self.vruntime: dict[VcpuId, float] = {v: 0.0 for v in self._where}
        self.vruntime.update(vruntime or {})
        #: the cpu.weight OBS-C set per vCPU, as the backend keeps it
        self.cpu_weight: dict[VcpuId, int] = {}
        self._flat = self._weights()
        #: the current slice's start, cycles
        self.now = 0.0
        self._slice_end = 0.0
        self._ran_from: dict[VcpuId, float] = {}

    # --- Host port --------------------------------------------------------------------

    def observe(self, window_cycles: float | None = None, scale: float = 1.0) -> Observation:
        """Every VM's vCPUs and counter samples (:meth:`MultiHost.observe`)."""
        return self.multihost.observe(window_cycles, scale)

    def act(self, actions: Sequence[Action]) -> ActResult:
        """Pin and release through :class:`MultiHost`; ``SetCpuWeight`` as the backend does."""
        weights = [a for a in actions if isinstance(a, SetCpuWeight)]
        others = [a for a in actions if not isinstance(a, SetCpuWeight)]
        before = {v: self._cpu(v) for v in self._where}
        result = self.multihost.act(others)
        self._renormalise(before)
        applied: list[Action] = list(result.applied)
        failed = list(result.failed)
        for action in weights:
            if action.vcpu not in self._where:
                failed.append((action, f"{action.vcpu} is not running"))
                continue
            self.cpu_weight[action.vcpu] = max(1, min(action.weight, 10_000))
            applied.append(action)
        self._flat = self._weights()
        return ActResult(tuple(applied), tuple(failed))

    # --- the scheduler ----------------------------------------------------------------

    def run_queues(self) -> dict[int, list[VcpuId]]:
        """Per CPU, the vCPUs whose CPU it is, by id."""
        queues: dict[int, list[VcpuId]] = {}
        for vcpu in sorted(self._where):
            queues.setdefault(self._cpu(vcpu), []).append(vcpu)
        return queues

    def pick(self) -> dict[int, VcpuId]:
        """Per CPU, the vCPU to run next: the smallest virtual runtime (then the lowest id)."""
        return {
            cpu: min(queue, key=lambda v: (self.vruntime[v], v))
            for cpu, queue in self.run_queues().items()
        }

    def thread(self, vcpu: VcpuId) -> int:
        """The engine thread of a vCPU."""
        return self._where[vcpu][2]

    def vcpu_of(self, tid: int) -> VcpuId:
        """The vCPU an engine thread runs."""
        host = self.multihost.host_of[tid]
        return VcpuId(host.vm, host.thread_vcpu[tid])

    def begin_slice(self, length: float) -> dict[int, VcpuId]:
        """Start a slice of ``length`` cycles: who runs; the others sleep until it ends.

        :returns: per CPU, the vCPU that runs in this slice.
        """
        end = self.now + length
        running = self.pick()
        chosen = set(running.values())
        for vcpu in self._where:
            tid = self.thread(vcpu)
            if vcpu not in chosen:
                self.engine.push_sleep(tid, max(end, self.engine.thread_time(tid)))
            elif self.engine.thread_time(tid) < self.now:
                # it waited for its CPU until now
                self.engine.push_sleep(tid, self.now)
        self._slice_end = end
        self._ran_from = {v: max(self.now, self.engine.thread_time(self.thread(v))) for v in chosen}
        return running

    def end_slice(self) -> None:
        """Age the vCPUs that ran by their weighted run time; the next slice starts."""
        for vcpu, start in self._ran_from.items():
            ran = max(0.0, self.engine.thread_time(self.thread(vcpu)) - start)
            self.vruntime[vcpu] += ran * NICE_0_LOAD / self._flat[vcpu]
        self.now = self._slice_end

    @property
    def slice_end(self) -> float:
        """The current slice's end, cycles."""
        return self._slice_end

    # --- internals --------------------------------------------------------------------

    def _cpu(self, vcpu: VcpuId) -> int:
        host, index, _ = self._where[vcpu]
        return host.vcpu_cpu[index]

    def _weights(self) -> dict[VcpuId, float]:
        vcpus_of: dict[str, list[VcpuId]] = {}
        for vcpu in sorted(self._where):
            vcpus_of.setdefault(vcpu.vm, []).append(vcpu)
        return flat_weights(vcpus_of, self.cpu_weight, self.backend)

    def _renormalise(self, before: Mapping[VcpuId, int]) -> None:
        """A vCPU moved to another CPU keeps its lag: ``v - min(old) + min(new)``."""
        floor_before = self._floors(before)
        after = {v: self._cpu(v) for v in self._where}
        floor_after = self._floors(after, exclude={v for v in after if after[v] != before[v]})
        for vcpu, cpu in after.items():
            if cpu != before[vcpu]:
                lag = self.vruntime[vcpu] - floor_before[before[vcpu]]
                self.vruntime[vcpu] = floor_after.get(cpu, floor_before[before[vcpu]]) + lag

    def _floors(
        self, cpu_of: Mapping[VcpuId, int], exclude: set[VcpuId] | None = None
    ) -> dict[int, float]:
        floors: dict[int, float] = {}
        for vcpu, cpu in cpu_of.items():
            if exclude and vcpu in exclude:
                continue
            floors[cpu] = min(floors.get(cpu, self.vruntime[vcpu]), self.vruntime[vcpu])
        return floors


if TYPE_CHECKING:  # conformance to the Host port, as mypy sees it
    from unicache.host.ports import Host

    _check: Host = SlicedHost.__new__(SlicedHost)
