"""The replay host: observations come from a recorded trace, actions change its VM view."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from unicache.host.ports import ActResult
from unicache.model import (
    Action,
    CounterSample,
    GuestReport,
    Observation,
    PinVcpu,
    ReleaseVcpu,
    Vcpu,
    VcpuId,
    Vm,
)
from unicache.trace import Trace, VmStart, VmStop


class ReplayHost:
    """Feeds a trace tick by tick; pinning actions change the vCPU affinities it reports.

    A vCPU starts floating over all CPUs of the machine, as Linux would leave it.

    :param trace: the parsed trace.
    :param all_cpus: the machine's CPUs.
    """

    name = "replay"

    def __init__(self, trace: Trace, all_cpus: frozenset[int]) -> None:
        self._trace = trace
        self._ticks = sorted(trace.ticks)
        self._position = 0
        self._all_cpus = all_cpus
        self._vms: dict[str, VmStart] = {}
        self._affinity: dict[VcpuId, frozenset[int]] = {}

    def observe(self) -> Observation | None:
        """The next tick's observation, or ``None`` at the end of the trace."""
        if self._position >= len(self._ticks):
            return None
        tick = self._ticks[self._position]
        self._position += 1
        samples: list[CounterSample] = []
        reports: list[GuestReport] = []
        for event in self._trace.ticks[tick]:
            if isinstance(event, VmStart):
                self._vms[event.name] = event
            elif isinstance(event, VmStop):
                self._vms.pop(event.name, None)
            elif isinstance(event, CounterSample):
                if self._known(event.vcpu):
                    samples.append(event)
            elif event.vm in self._vms:
                reports.append(event)
        vms = tuple(
            Vm(
                name,
                tuple(
                    Vcpu(vid, None, self._affinity.get(vid, self._all_cpus))
                    for vid in (VcpuId(name, i) for i in range(start.vcpus))
                ),
                start.memory_bytes,
                start.nodes,
            )
            for name, start in sorted(self._vms.items())
        )
        return Observation(tick, vms, tuple(samples), tuple(reports))

    def _known(self, vcpu: VcpuId) -> bool:
        start = self._vms.get(vcpu.vm)
        return start is not None and vcpu.index < start.vcpus

    def act(self, actions: Sequence[Action]) -> ActResult:
        """Apply pins and releases to the replayed view; other actions are accepted as is."""
        applied: list[Action] = []
        failed: list[tuple[Action, str]] = []
        for action in actions:
            if isinstance(action, PinVcpu):
                if not self._known(action.vcpu):
                    failed.append((action, f"{action.vcpu} is not running"))
                    continue
                self._affinity[action.vcpu] = action.cpus
            elif isinstance(action, ReleaseVcpu):
                # back on every CPU, as it started
                self._affinity.pop(action.vcpu, None)
            applied.append(action)
        return ActResult(tuple(applied), tuple(failed))


if TYPE_CHECKING:  # conformance, as mypy sees it
    from unicache.host.ports import Host

    _check: Host = ReplayHost.__new__(ReplayHost)
