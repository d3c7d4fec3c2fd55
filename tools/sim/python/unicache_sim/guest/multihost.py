"""Several VMs on one simulated machine: the Host port over their own hosts, and the host's
scheduler.

``MultiHost`` composes one :class:`~unicache_sim.guest.simhost.SimHost` per VM, all on one
native engine, so that every VM keeps its own vCPUs, guest threads, report and placement
table (its own :class:`~unicache_sim.guest.shim.GuestShim`), as on a live host each VM has
its own QEMU and agent. ``observe`` is the daemon's view of the whole host: every VM's
vCPUs, samples and report in one :class:`~unicache.model.Observation`; ``act`` hands each
VM the actions that name it, then runs the vCPUs on CPUs host-wide.

The host's scheduler (Linux's CFS, under both baselines: the CPU sets differ, the rules
do not) is modelled by four rules, each named after what it stands for:

1. **Wake-up** (``select_idle_sibling``, which searches the LLC domain only): a vCPU whose
   thread wakes for a request runs on its CPU if no other runnable thread is there, else
   on an idle CPU of its set in the same LLC group, else it waits where it is. Moving a
   sleeping thread costs no hop, only the refill the caches charge.
2. **Newly idle** (``newidle_balance``): a CPU whose last runnable thread goes to sleep
   pulls a waiting vCPU (one of two or more runnable on a CPU, allowed here by its set)
   from its LLC group first, else from its NUMA node (CFS's newidle balance walks the
   domains up to the node while the pull is cheaper than the idle time; farther CPUs
   wait for rule 4). A waiting vCPU moves without a hop.
3. **Churn** (the MFC experiment's ``linux_float``): every balancing period a runnable
   vCPU moves to an idle CPU of its set with probability ``float_prob``, of its own LLC
   group 4 times out of 5.
4. **Idle pull** (the periodic load balance, every domain up to the machine): a CPU with
   two or more runnable vCPUs gives one to an idle CPU of that vCPU's set, of its LLC
   group first.

A VM alone on the host, with one vCPU per CPU and threads that never sleep, is the MFC
experiment's host: ``tests/sim/test_multihost.py`` checks that it measures the same.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import TYPE_CHECKING

from unicache.host.ports import ActResult
from unicache.model import Action, Observation

from unicache_sim import _native
from unicache_sim.engine.config import SimConfig
from unicache_sim.guest.simhost import SimHost, linux_float


class MultiHost:
    """Several VMs, each with its own :class:`SimHost`, on one engine.

    :param cfg: the simulated machine.
    :param engine: the engine every VM's threads run on.
    :param hosts: one host per VM (names unique), in the order the VMs arrived.
    """

    name = "sim"

    def __init__(self, cfg: SimConfig, engine: _native.Engine, hosts: Sequence[SimHost]) -> None:
        self.cfg = cfg
        self.engine = engine
        self.hosts = tuple(hosts)
        self._by_vm = {h.vm: h for h in hosts}
        if len(self._by_vm) != len(self.hosts):
            raise ValueError("every VM of a host needs its own name")
        #: thread id -> the host of its VM
        self.host_of: dict[int, SimHost] = {}
        # a vCPU's number host-wide: VMs in arrival order, vCPUs in index order
        self._base: dict[str, int] = {}
        for host in self.hosts:
            self._base[host.vm] = sum(h.n_vcpus for h in self.hosts[: len(self._base)])
        self.tick = 0
        #: vCPUs the host's scheduler has moved (wake-ups, churn and idle pulls)
        self.moves = 0
        # the machine's shape, read on every wake-up and idle balance
        self._group = tuple(cfg.group_of(c) for c in range(cfg.n_cpus))
        self._node = tuple(cfg.cpu_node)
        #: per LLC group, its CPUs in order (a wake-up looks at its own group only)
        self._group_cpus: dict[int, tuple[int, ...]] = {}
        for cpu, group in enumerate(self._group):
            self._group_cpus[group] = (*self._group_cpus.get(group, ()), cpu)

    def add_thread(self, vm: str, tid: int, vcpu: int) -> None:
        """Register a guest thread of ``vm`` running on its vCPU ``vcpu``."""
        host = self._by_vm[vm]
        host.add_thread(tid, vcpu)
        self.host_of[tid] = host

    # --- Host port --------------------------------------------------------------------

    def observe(self, window_cycles: float | None = None, scale: float = 1.0) -> Observation:
        """Every VM's vCPUs, counter samples and guest report, as one observation.

        :param window_cycles: the simulated time the observation covers.
        :param scale: the reports' counts are multiplied by this (a sampled window).
        """
        self.tick += 1
        parts = [h.observe(window_cycles, scale) for h in self.hosts]
        return Observation(
            self.tick,
            tuple(vm for p in parts for vm in p.vms),
            tuple(s for p in parts for s in p.samples),
            tuple(r for p in parts for r in p.reports),
        )

    def act(self, actions: Sequence[Action]) -> ActResult:
        """Each VM takes the actions that name it; then the vCPUs run on CPUs host-wide.

        Never raises for one action: an action naming no VM of this host fails.
        """
        by_vm: dict[str, list[Action]] = {}
        failed: list[tuple[Action, str]] = []
        for action in actions:
            vm = action.vm if hasattr(action, "vm") else action.vcpu.vm
            if vm not in self._by_vm:
                failed.append((action, f"VM {vm} is not running"))
                continue
            by_vm.setdefault(vm, []).append(action)
        applied: list[Action] = []
        for host in self.hosts:
            result = host.apply(by_vm.get(host.vm, ()))
            applied += result.applied
            failed += result.failed
        self.place_vcpus()
        return ActResult(tuple(applied), tuple(failed))

    # --- the host's scheduler ---------------------------------------------------------

    def place_vcpus(self) -> None:
        """Run every vCPU on a CPU of its set, as :meth:`SimHost.act` does for one VM.

        A vCPU stays where it is while that CPU is in its set and holds fewer than the
        host's overcommit (vCPUs per CPU, rounded up; 1 where every vCPU has a CPU) of the
        vCPUs kept so far; vCPUs that run a thread keep their CPU first. The others go to
        the CPU of their set with the fewest vCPUs (lowest first). With one VM of one
        vCPU per CPU this is exactly ``SimHost``'s rule.
        """
        total = sum(h.n_vcpus for h in self.hosts)
        cap = max(1, -(-total // self.cfg.n_cpus))
        load = [0] * self.cfg.n_cpus
        entries = [(h, v) for h in self.hosts for v in sorted(h.vcpu_cpu)]
        busy = {(h.vm, v) for h in self.hosts for v in h.thread_vcpu.values()}
        kept: set[tuple[str, int]] = set()
        for host, vcpu in sorted(
            entries, key=lambda e: ((e[0].vm, e[1]) not in busy, self._key(e[0], e[1]))
        ):
            cpu = host.vcpu_cpu[vcpu]
            if cpu in host.affinity[vcpu] and load[cpu] < cap:
                kept.add((host.vm, vcpu))
                load[cpu] += 1
        for host, vcpu in entries:
            if (host.vm, vcpu) in kept:
                continue
            to = min(host.affinity[vcpu], key=lambda c: (load[c], c))
            load[to] += 1
            host.move_vcpu(vcpu, to)

    def wake(self, tid: int) -> None:
        """Rule 1: thread ``tid`` wakes for a request; its vCPU runs where CFS would put it."""
        host = self.host_of[tid]
        vcpu = host.thread_vcpu[tid]
        here = host.vcpu_cpu[vcpu]
        if self.engine.runnable_count(here) == 0:
            return
        # select_idle_sibling: an idle CPU of the set in here's LLC group, the next one
        # after here (so that wakers spread), asked of that group's CPUs only
        cpus = host.affinity[vcpu]
        idle = [c for c in self.engine.idle_among(self._group_cpus[self._group[here]]) if c in cpus]
        if idle:
            to = next((c for c in idle if c > here), idle[0])
            # the thread was asleep: no hop, only the refill the caches will charge
            host.move_vcpu(vcpu, to, 0.0)
            self.moves += 1

    def idle(self, cpu: int) -> None:
        """Rule 2: the last runnable thread of ``cpu`` went to sleep; it pulls a waiting
        vCPU of its LLC group, else of its node."""
        if self.engine.runnable_count(cpu) > 0:
            return
        groups, nodes = self._group, self._node
        group, node = groups[cpu], nodes[cpu]
        # same LLC group first, most runnable, CPU id (sorted as keys: no call per donor)
        crowded = [
            (groups[c] != group, -n, c) for c, n in self.engine.crowded_cpus(2) if nodes[c] == node
        ]
        crowded.sort()
        for _, _, donor in crowded:
            for tid in reversed(self.engine.runnable_on(donor)):
                host = self.host_of.get(tid)
                if host is None:
                    continue
                vcpu = host.thread_vcpu[tid]
                if cpu in host.affinity[vcpu] and host.vcpu_cpu[vcpu] == donor:
                    host.move_vcpu(vcpu, cpu, 0.0)
                    self.moves += 1
                    return

    def balance(self, rng: random.Random, float_prob: float) -> None:
        """Rules 3 and 4, once per balancing period."""
        runnable_tids = [t for t in sorted(self.host_of) if self.engine.is_runnable(t)]
        keys: dict[int, tuple[SimHost, int]] = {}
        placed: dict[int, int] = {}
        allowed: dict[int, frozenset[int]] = {}
        for tid in runnable_tids:
            host = self.host_of[tid]
            vcpu = host.thread_vcpu[tid]
            key = self._key(host, vcpu)
            if key in keys:
                continue
            keys[key] = (host, vcpu)
            placed[key] = host.vcpu_cpu[vcpu]
            allowed[key] = host.affinity[vcpu]
        # rule 3: churn
        for key, cpu in linux_float(rng, float_prob, self.cfg, placed, allowed):
            host, vcpu = keys[key]
            host.move_vcpu(vcpu, cpu)
            placed[key] = cpu
            self.moves += 1
        # rule 4: idle pull, one vCPU from each CPU that has more than one
        per_cpu: dict[int, list[int]] = {}
        for key, cpu in sorted(placed.items()):
            per_cpu.setdefault(cpu, []).append(key)
        runnable = [0] * self.cfg.n_cpus
        for cpu, members in per_cpu.items():
            runnable[cpu] = len(members)
        for cpu in sorted(per_cpu):
            members = per_cpu[cpu]
            if len(members) < 2:
                continue
            key = members[-1]
            host, vcpu = keys[key]
            to = self._idle_cpu(cpu, allowed[key], runnable)
            if to is None:
                continue
            runnable[cpu] -= 1
            runnable[to] += 1
            host.move_vcpu(vcpu, to)
            self.moves += 1

    def _idle_cpu(self, here: int, cpus: frozenset[int], runnable: Sequence[int]) -> int | None:
        """An idle CPU of ``cpus``: of ``here``'s LLC group first, the next one after
        ``here`` in CPU order (so that wakers spread), else any in the set."""
        groups = self._group
        group = groups[here]
        idle = sorted(c for c in cpus if runnable[c] == 0)
        same = [c for c in idle if groups[c] == group]
        pool = same or idle
        if not pool:
            return None
        return next((c for c in pool if c > here), pool[0])

    def _key(self, host: SimHost, vcpu: int) -> int:
        return self._base[host.vm] + vcpu


if TYPE_CHECKING:  # conformance to the Host port, as mypy sees it
    from unicache.host.ports import Host

    _check: Host = MultiHost.__new__(MultiHost)
