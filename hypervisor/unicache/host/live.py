"""The live host: real VMs, perf counters, affinity, cgroup weights and guest channels.

Observing reads each vCPU thread's counters (hardware where they exist, task-clock
otherwise) and drains the guest reports the channel accepted; acting pins vCPU threads
through the journaling :class:`~unicache.host.linux.affinity.Actuator`, sets CPU weights
(cgroup v2 where the cpu controller exists, libvirt's ``cpu_shares`` for libvirt domains)
and publishes placement tables to guest agents. One VM's failure never stops the others:
its actions come back as failed and are retried. A dry run takes every setter's dry-run
path, which returns what it would write and writes nothing.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from unicache.cpulist import format_list
from unicache.errors import UnicacheError
from unicache.host.linux.affinity import thread_last_cpu
from unicache.host.linux.perf import ThreadCounts
from unicache.host.ports import (
    ActResult,
    AffinitySetter,
    PerfPort,
    Publisher,
    RunningVm,
    VmSource,
    WeightSetter,
)
from unicache.model import (
    TABLE_ACTIONS,
    Action,
    CounterSample,
    CounterSource,
    GuestReport,
    Observation,
    PinVcpu,
    PublishPlacement,
    ReleaseVcpu,
    SetCpuWeight,
    Vcpu,
    VcpuId,
    Vm,
)

log = logging.getLogger(__name__)


class LiveHost:
    """Observe and act on the VMs of this machine.

    :param vms: where running VMs come from.
    :param perf: per-thread counters.
    :param actuator: journaled affinity changes.
    :param weights: cgroup or libvirt weights, or ``None`` where the host has no way to
        set them (cgroup v2 without the cpu controller).
    :param publisher: the guest channel, or ``None`` to skip placement tables.
    :param reports: returns the guest reports accepted since the last call.
    :param clock: monotonic clock (seconds).
    :param dry_run: change nothing: every setter takes its dry-run path (the actuator and
        ``weights`` built with ``dry_run``, the publisher called with it) and the result
        carries what each would write (:attr:`ActResult.would_write`); an action that a
        real run would fail (no weight setter, no agent connected) fails the same way.
    """

    name = "live"

    def __init__(
        self,
        vms: VmSource,
        perf: PerfPort,
        actuator: AffinitySetter,
        weights: WeightSetter | None,
        publisher: Publisher | None,
        reports: Callable[[], list[GuestReport]],
        clock: Callable[[], float] = time.monotonic,
        dry_run: bool = False,
    ) -> None:
        self._vms = vms
        self._dry_run = dry_run
        self._perf = perf
        self._actuator = actuator
        self._weights = weights
        self._publisher = publisher
        self._reports = reports
        self._clock = clock
        self._tick = 0
        self._last: dict[int, tuple[float, ThreadCounts]] = {}
        self._last_time: dict[VcpuId, tuple[float, int]] = {}
        self._running: dict[str, RunningVm] = {}

    @property
    def running(self) -> Mapping[str, RunningVm]:
        """The VMs seen by the last observation."""
        return dict(self._running)

    def observe(self, listed: Sequence[RunningVm] | None = None) -> Observation:
        """Counters of every vCPU thread since the last call, and the guests' reports.

        :param listed: the source's running VMs, when the caller listed them already (the
            daemon does, off its event loop: a backend may block, e.g. on QMP).
        """
        now = self._clock()
        listed = self._vms.running() if listed is None else listed
        running = {vm.name: vm for vm in listed}
        gone = set(self._running) - set(running)
        for name in sorted(gone):
            log.info("vm=%s gone: forgetting its threads", name)
            for index, tid in self._running[name].vcpu_threads.items():
                self._perf.forget(tid)
                self._last.pop(tid, None)
                self._actuator.forget(f"affinity/{VcpuId(name, index)}")
            for index in self._running[name].vcpu_times:
                self._last_time.pop(VcpuId(name, index), None)
                self._actuator.forget(f"affinity/{VcpuId(name, index)}")
        self._running = running
        reports = [r for r in self._reports() if r.vm in running]
        guest_bytes: dict[VcpuId, int] = {}
        for report in reports:
            for access in report.chunks:
                for index, nbytes in access.vcpu_bytes:
                    key = VcpuId(report.vm, index)
                    guest_bytes[key] = guest_bytes.get(key, 0) + nbytes
        vms: list[Vm] = []
        samples: list[CounterSample] = []
        for name, rvm in sorted(running.items()):
            vcpus = []
            for index, tid in sorted(rvm.vcpu_threads.items()):
                vid = VcpuId(name, index)
                try:
                    cpus = frozenset(os.sched_getaffinity(tid))
                except OSError:
                    continue  # the thread ended between listing and now
                vcpus.append(Vcpu(vid, tid, cpus, thread_last_cpu(tid)))
                sample = self._sample(vid, tid, now, guest_bytes.get(vid, 0))
                if sample is not None:
                    samples.append(sample)
            for index, (cpus, cpu_ns) in sorted(rvm.vcpu_times.items()):
                if index in rvm.vcpu_threads:
                    continue
                vid = VcpuId(name, index)
                vcpus.append(Vcpu(vid, None, cpus))
                timed = self._time_sample(vid, cpu_ns, now, guest_bytes.get(vid, 0))
                if timed is not None:
                    samples.append(timed)
            vms.append(
                Vm(name, tuple(sorted(vcpus, key=lambda v: v.id)), rvm.memory_bytes, rvm.nodes)
            )
        self._tick += 1
        return Observation(self._tick, tuple(vms), tuple(samples), tuple(reports))

    def _sample(self, vid: VcpuId, tid: int, now: float, nbytes: int) -> CounterSample | None:
        counts = self._perf.read(tid)
        if counts is None:
            return None
        previous = self._last.get(tid)
        self._last[tid] = (now, counts)
        if previous is None:
            return None  # the first reading only sets the baseline
        then, earlier = previous
        delta = counts.minus(earlier)
        wall_ns = max((now - then) * 1e9, 1.0)
        return CounterSample(
            vcpu=vid,
            source=delta.source,
            cycles=delta.cycles,
            instructions=delta.instructions,
            llc_references=delta.llc_references,
            llc_misses=delta.llc_misses,
            busy=min(delta.task_clock_ns / wall_ns, 1.0),
            guest_bytes=nbytes,
            task_clock_ns=delta.task_clock_ns,
        )

    def _time_sample(
        self, vid: VcpuId, cpu_ns: int, now: float, nbytes: int
    ) -> CounterSample | None:
        # a vCPU without a host thread: its CPU time as the hypervisor counts it stands in
        # for task-clock (no per-thread perf counters exist for it)
        previous = self._last_time.get(vid)
        self._last_time[vid] = (now, cpu_ns)
        if previous is None:
            return None
        then, earlier = previous
        ran = max(cpu_ns - earlier, 0)
        return CounterSample(
            vcpu=vid,
            source=CounterSource.SOFTWARE,
            busy=min(ran / max((now - then) * 1e9, 1.0), 1.0),
            guest_bytes=nbytes,
            task_clock_ns=ran,
        )

    def act(self, actions: Sequence[Action]) -> ActResult:
        """Carry out actions; one failure never stops the rest.

        A failure is the setter's ``OSError`` (a thread gone, a refused write) or one of
        unicache's own errors (a VM without a channel, a table over the protocol's limits).
        """
        applied: list[Action] = []
        writes: list[tuple[str, ...]] = []
        failed: list[tuple[Action, str]] = []
        for action in actions:
            try:
                why, wrote = self._apply(action)
            except OSError as err:
                why, wrote = err.strerror or str(err), ()
            except UnicacheError as err:
                why, wrote = str(err), ()
            if why is None:
                applied.append(action)
                writes.append(wrote)
            else:
                failed.append((action, why))
        return ActResult(tuple(applied), tuple(failed), tuple(writes) if self._dry_run else ())

    def _apply(self, action: Action) -> tuple[str | None, tuple[str, ...]]:
        """Carry out one action.

        :returns: (why it failed, or ``None``; the writes made, or with ``dry_run`` that
            would be, one line each).
        """
        if isinstance(action, PublishPlacement):
            if self._publisher is None:
                return "no guest channel", ()
            lines = self._publisher.publish(action, dry_run=self._dry_run)
            if not lines:
                return "agent not connected", ()
            nbytes = sum(len(line) for line in lines)
            return None, (f"vm {action.vm} agent: placement table version "
                          f"{action.table.version}, {len(action.table.entries)} entries, "
                          f"{len(lines)} lines, {nbytes} bytes",)
        if isinstance(action, TABLE_ACTIONS):
            # carried out by the PublishPlacement of the same decision (its entries)
            return None, ()
        rvm = self._running.get(action.vcpu.vm)
        index = action.vcpu.index
        if rvm is None or (index not in rvm.vcpu_threads and index not in rvm.vcpu_times):
            return f"{action.vcpu} is not running", ()
        tid = rvm.vcpu_threads.get(index)
        if isinstance(action, PinVcpu):
            # no host thread (Xen): tid 0 tells the actuator to pin through the hypervisor
            cpus = format_list(self._actuator.set_affinity(action.target, tid or 0, action.cpus))
            where = f"thread {tid}" if tid else f"vm {rvm.name} vcpu {index} (vcpupin)"
            return None, (f"{where} affinity = {cpus}",)
        if isinstance(action, ReleaseVcpu):
            line = self._actuator.restore(action.target)
            log.info("%s", line)
            return None, (line,)
        if isinstance(action, SetCpuWeight):
            if tid is None:
                return "cpu.weight needs a host thread; this vCPU has none", ()
            if self._weights is None:
                return "cpu.weight not available (see the startup line)", ()
            wrote = self._weights.set_weight(rvm.name, rvm.pid, index, tid, action.weight)
            return None, wrote
        return f"unknown action {action!r}", ()


if TYPE_CHECKING:  # conformance to the ports, as mypy sees it
    from pathlib import Path

    from unicache.host.linux.affinity import Actuator
    from unicache.host.linux.cgroup import CgroupWeights
    from unicache.host.ports import Host

    # the thread backends (the libvirt ones check themselves in host/libvirt/, the VM
    # sources in theirs; the channel server, a Publisher, in daemon.py, which joins the two)
    _affinity: AffinitySetter = Actuator(Path())
    _weights: WeightSetter = CgroupWeights(Path(), Path())
    _host: Host = LiveHost.__new__(LiveHost)
