"""The daemon, ``unicache run``: observe -> decide -> act -> log, every interval (and early
for a chunk a guest reports that no round decided on, ``roundpace``).

It owns the startup checks (each missing capability is one line), crash recovery (the
affinity and cgroup journals of a previous run are restored before anything else), the
guest channel server, and the decision log (JSON lines, every action with its reason).
On SIGTERM or SIGINT it restores every change it made and exits 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import signal
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from unicache import policystate
from unicache.config import DaemonConfig
from unicache.decisionlog import (
    DecisionLog,
)
from unicache.errors import ConfigError, StateError, UnicacheError
from unicache.gcpace import GcPacer
from unicache.host.libvirt.weights import LibvirtWeights
from unicache.host.linux.cgroup import CgroupWeights, probe_cpu_weight
from unicache.host.linux.perf import PerfCounters, hardware_counters_available
from unicache.host.live import LiveHost
from unicache.host.ports import ActResult, AffinitySetter, VmSource, WeightSetter
from unicache.loop import run_rounds
from unicache.metrics import DaemonMetrics
from unicache.model import Action, Decision, Observation
from unicache.policy.obs.options import obs_options_for
from unicache.policy.round import RoundState, UnicachePolicy
from unicache.policy.scu.options import scu_options_for
from unicache.roundpace import RoundPacer, RoundTrigger
from unicache.roundrecord import record_round
from unicache.roundworker import run_round
from unicache.topology.sysfs import load_topology

log = logging.getLogger(__name__)

#: a round that runs longer than this many intervals (and at least the minimum, seconds)
#: is late: its actions are dropped (roundworker.py)
ROUND_DEADLINE_INTERVALS = 5
ROUND_DEADLINE_MIN_S = 5.0
#: a full collection between rounds this long (seconds) or longer is said in the log
GC_NOTE_S = 0.1


async def run_daemon(
    config: DaemonConfig,
    vm_source: VmSource | None = None,
    echo: IO[str] | None = None,
    stop: asyncio.Event | None = None,
    echo_json: bool = False,
) -> int:
    """Run the loop until ``stop`` is set, a signal arrives or ``config.rounds`` are done.

    :param config: the configuration.
    :param vm_source: where VMs come from (``None``: libvirt if reachable, else unicache's
        own QEMU).
    :param echo: where decisions are echoed as they are logged (``None``: nowhere).
    :param stop: set to stop (SIGTERM and SIGINT set it too).
    :param echo_json: echo every decision-log record as its JSON line, not a human line.
    :returns: the exit code (0).
    """
    from unicache.channel.server import ChannelServer

    stop = stop or asyncio.Event()
    decisions = DecisionLog(config.log_path, echo, config.log_max_mib << 20, echo_json)
    decisions.open()

    def note(message: str) -> None:
        decisions.write({"kind": "note", "message": message})
        log.info("%s", message)

    policy, hardware = _policy_for(config, note)
    source = vm_source if vm_source is not None else _vm_source(config, note)
    # crash recovery first: whatever a previous run left changed is put back
    actuator, weights = _setters(config, source, note)
    # a report naming a chunk no round decided on asks for a round now (roundpace)
    pacer = RoundPacer(RoundTrigger(config.interval_s))
    channel = ChannelServer(
        config.state_dir / "channels", _channel_params(config, policy), on_arrival=pacer.arrived
    )
    perf = PerfCounters(hardware)
    host = LiveHost(
        source, perf, actuator, weights, channel, channel.drain_reports, dry_run=config.dry_run
    )
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    metrics = _metrics(config, note)
    state = _restored_state(config, policy, note)
    deadline_s = max(ROUND_DEADLINE_MIN_S, ROUND_DEADLINE_INTERVALS * config.interval_s)
    vms = _DaemonHost(host, source, channel, stop, deadline_s, note, pacer)
    collector = GcPacer()
    try:
        await _serve(
            _Serving(config, policy, vms, channel, decisions, metrics, pacer, collector, stop),
            state,
            _decider(policy, stop, deadline_s, note),
            note,
        )
    finally:
        for line in actuator.restore_all():
            note(f"shutdown: {line}")
        if weights is not None:
            for line in weights.restore_all():
                note(f"shutdown: {line}")
        await channel.close()
        perf.close()
        source.close()  # after channel.close(): restores the agent sockets' placeholders
        decisions.flush()
        decisions.close()
        collector.release()
    return 0


def _policy_for(
    config: DaemonConfig, note: Callable[[str], None]
) -> tuple[UnicachePolicy, bool]:
    """The round's policy for this host's topology (``--always-place``: without the cost
    models, watches and step-asides), what it says of them, and whether the CPU has
    hardware counters."""
    topo = load_topology(config.model, config.model_file)
    scu_options = scu_options_for(topo, config.unify)
    if config.always_place:
        scu_options = replace(scu_options, cost=None, watch=False)
    obs_options = obs_options_for(topo, step_aside=not config.always_place)
    policy = UnicachePolicy(
        topo, config.unify, obs_options=obs_options, scu_options=scu_options,
        color_step_aside=not config.always_place,
        replica_step_aside=not config.always_place,
    )
    note(f"topology {topo.name}: {len(policy.units)} cache units with --unify {config.unify}")
    if config.always_place:
        note("--always-place: SCU places every VM, SRM colors every stream, NCC replicates "
             "every chunk read twice remotely and OBS pins every vCPU, without their cost "
             "models, watches and step-asides (never slower no longer holds)")
    if len(policy.units) < 2:
        note("only one cache unit: SCU has nothing to unify (try --unify l2)")
    if policy.scu.options.cost_source != "model":
        note(f"SCU costs: {policy.scu.options.cost_source} (docs/policies.md)")
    hardware, why = hardware_counters_available()
    note(why)
    return policy, hardware


def _vm_source(config: DaemonConfig, note: Callable[[str], None]) -> VmSource:
    """libvirt when reachable, else unicache's own QEMU (the libvirt actuator needs it)."""
    from unicache.host.libvirt.choose import choose_vm_source

    source, why_vms = choose_vm_source(config.connect, config.state_dir)
    note(why_vms)
    return source


def _setters(
    config: DaemonConfig, source: VmSource, note: Callable[[str], None]
) -> tuple[AffinitySetter, WeightSetter | None]:
    """The journaled affinity and weight setters for ``source``, each first putting back
    what a previous run left changed (a dry run builds the same setters with ``dry_run``:
    they return what they would write)."""
    from unicache.host.libvirt.actuator import make_actuator
    from unicache.host.libvirt.source import LibvirtVmSource

    actuator = make_actuator(source, config.state_dir / "journal.json", config.dry_run)
    for line in actuator.restore_all() if actuator.pending else []:
        note(f"recovery: {line}")
    weights: WeightSetter | None = None
    if isinstance(source, LibvirtVmSource):
        # libvirt owns its domains' cgroups: credit goes through its scheduler parameters
        note("OBS-C weights: each libvirt domain's cpu_shares (virsh schedinfo --live)")
        weights = LibvirtWeights(source, config.state_dir / "libvirt-shares.json",
                                 dry_run=config.dry_run)
    else:
        support = probe_cpu_weight()
        note(support.why)
        if support.root is not None:
            weights = CgroupWeights(support.root, config.state_dir / "cgroups.json",
                                    dry_run=config.dry_run)
    for line in weights.restore_all() if weights is not None else []:
        note(f"recovery: {line}")
    return actuator, weights


def _channel_params(config: DaemonConfig, policy: UnicachePolicy) -> ChannelParams:
    """The guest must chunk files exactly as SCU does (MFC §4.7) and skip small reads
    (§4.5)."""
    from unicache.channel.protocol import ChannelParams

    scu = policy.scu.options
    return ChannelParams(
        chunk_size=scu.chunk_size,
        min_read_size=min(scu.params.min_read_size, scu.chunk_size),
        report_interval_s=max(config.interval_s, 0.1),
    )


def _metrics(config: DaemonConfig, note: Callable[[str], None]) -> DaemonMetrics:
    """The daemon's metrics, served on 127.0.0.1 when ``metrics_port`` is given."""
    metrics = DaemonMetrics()
    if config.metrics_port is not None:
        try:
            metrics.serve(config.metrics_port)
        except OSError as err:
            raise ConfigError(f"cannot serve metrics on port {config.metrics_port}") from err
        note(f"metrics on http://127.0.0.1:{config.metrics_port}/metrics")
    return metrics


def _decider(
    policy: UnicachePolicy, stop: asyncio.Event, deadline_s: float, note: Callable[[str], None]
) -> Callable[[Observation, RoundState], Awaitable[tuple[Decision, RoundState] | None]]:
    """How a round is decided: in a worker thread, so the loop keeps serving every VM's
    channel and the signals while one guest's reports keep the policy busy (issue #12);
    a round over its deadline has its actions dropped."""

    async def decide(
        obs: Observation, state: RoundState
    ) -> tuple[Decision, RoundState] | None:
        outcome = await run_round(functools.partial(policy.decide, obs, state), stop,
                                  deadline_s)
        if outcome is None:
            return None  # stopped: restore now, whatever the round is doing
        decision, state = outcome.value
        if outcome.late:
            note(
                f"round {obs.tick} took {outcome.seconds:.1f} s, over its {deadline_s:.0f} s "
                f"deadline: its {len(decision.actions)} actions are dropped (the host has "
                "moved on since it was observed)"
            )
            decision = replace(decision, actions=())
        return decision, state

    return decide


@dataclass(frozen=True, slots=True)
class _Serving:
    """What the daemon's rounds go through: the settings, the policy, the host as the loop
    sees it, the channels, the log, the metrics, the pace, the collector and the stop."""

    config: DaemonConfig
    policy: UnicachePolicy
    vms: _DaemonHost
    channel: ChannelServer
    decisions: DecisionLog
    metrics: DaemonMetrics
    pacer: RoundPacer
    collector: GcPacer
    stop: asyncio.Event


async def _serve(
    serving: _Serving,
    state: RoundState,
    decide: Callable[[Observation, RoundState], Awaitable[tuple[Decision, RoundState] | None]],
    note: Callable[[str], None],
) -> None:
    """The rounds: each recorded, then the collector's work, then the wait for the next."""
    config, channel, pacer, collector = (
        serving.config, serving.channel, serving.pacer, serving.collector
    )
    rounds = 0
    async with contextlib.aclosing(
        run_rounds(serving.vms, serving.policy, state, config.rounds, decide)
    ) as loop_rounds:
        async for rnd in loop_rounds:
            channels = channel.status()
            errors = [(st.vm, kind, n) for st in channels for kind, n in st.errors]
            traffic = [(st.vm, st.bytes_in, st.bytes_out) for st in channels]
            # the records, the status checkpoint and the metrics are written in a worker
            # thread: a disk that stalls (a journal commit, a full log) never stalls the
            # channels and signals the loop serves (issue #12)
            await asyncio.to_thread(
                record_round, serving.decisions, serving.policy, rnd, serving.metrics, errors,
                config.state_dir, dry_run=config.dry_run, log_chunks=config.log_chunks,
                channel_bytes=traffic,
            )
            rounds += 1
            if config.rounds is not None and rounds >= config.rounds:
                break
            # the collector's work between rounds, not in the next one (gcpace)
            swept = collector.settle()
            if swept.full and swept.seconds >= GC_NOTE_S:
                note(f"gc: a collection over all {swept.frozen} objects took "
                     f"{swept.seconds * 1e3:.0f} ms between rounds (one every "
                     f"{collector.full_every_s:.0f} s; the others look at a round's own)")
            obs = rnd.observation
            pacer.trigger.took(obs.reports, [vm.name for vm in obs.vms], pacer.clock(),
                               periodic=not serving.vms.early)
            await pacer.wait(serving.stop)


class _DaemonHost:
    """The live host as the loop sees it: observing lists the VMs (in a worker thread, as
    the round: QMP or libvirt may block, and a stop does not wait for them), logs their
    lifecycle events and opens or closes their guest channels."""

    def __init__(
        self,
        host: LiveHost,
        source: VmSource,
        channel: Any,
        stop: asyncio.Event,
        deadline_s: float,
        note: Callable[[str], None],
        pacer: RoundPacer,
    ) -> None:
        self.host = host
        self.source = source
        self.channel = channel
        self.stop = stop
        self.deadline_s = deadline_s
        self.note = note
        self.pacer = pacer
        #: VMs whose guest channel is open
        self.listening: set[str] = set()
        #: the round being observed started before the periodic one was due
        self.early = False

    async def observe(self) -> Observation | None:
        if self.stop.is_set():
            return None
        self.early = self.pacer.trigger.started(self.pacer.clock())
        listed = await run_round(self.source.running, self.stop, self.deadline_s)
        if listed is None:
            return None
        # the reports are drained now, with no wait in between: every report that arrived
        # until here is this round's, and one arriving later may ask for the next
        self.pacer.trigger.drained()
        obs = self.host.observe(listed.value)
        for event in self.source.drain_events():
            self.note(f"vm {event.vm}: {event.kind} ({event.detail})")
        await _sync_channels(self.channel, self.host, self.listening, self.note)
        return obs

    def act(self, actions: Sequence[Action]) -> ActResult:
        return self.host.act(actions)


async def _sync_channels(
    channel: Any, host: LiveHost, listening: set[str], note: Callable[[str], None]
) -> None:
    running = host.running
    for name in sorted(set(running) - listening):
        vm = running[name]
        sock = vm.agent_socket
        if sock is None:
            continue
        try:
            if vm.agent_listens:
                # QEMU listens (libvirt mode='bind'): dial only a socket of QEMU's own user
                owner = _process_uid(vm.pid) if os.geteuid() == 0 else None
                await channel.connect_vm(name, sock, owner_uid=owner)
                note(f"vm {name}: dialing its agent's socket {sock}")
            else:
                await channel.add_vm(name, sock)
                note(f"vm {name}: listening for its agent on {sock}")
            listening.add(name)
        except (UnicacheError, OSError) as err:  # one VM's channel never stops the others
            note(f"vm {name}: no agent channel: {err}")
    for name in sorted(listening - set(running)):
        await channel.remove_vm(name)
        listening.discard(name)
        note(f"vm {name}: gone, channel closed")


def _restored_state(
    config: DaemonConfig, policy: UnicachePolicy, note: Callable[[str], None]
) -> RoundState:
    """What the policies learned before a restart (``unicache.policystate``), or a fresh
    state, saying which and why; a file that cannot be restored is kept aside to inspect."""
    try:
        state = policystate.load(config.state_dir)
        if state is None:
            return RoundState()
        policy.start(state)
    except StateError as err:
        path = policystate.checkpoint(config.state_dir).path
        with contextlib.suppress(OSError):
            path.replace(path.with_name(path.name + ".refused"))
        note(f"round state not restored, starting afresh: {err}")
        return RoundState()
    note(
        f"round state restored from {policystate.STATE_FILE}: SCU round {state.scu.round}, "
        f"{len(state.obs.unit_of)} vCPUs in units, {len(state.scu.watched)} VMs watched, "
        f"{len(state.scu.aside)} left alone"
    )
    return state


def _process_uid(pid: int) -> int:
    """The user a process runs as (QEMU's, whose socket the daemon may dial).

    :raises OSError: if the process is gone.
    """
    return os.stat(f"/proc/{pid}").st_uid


if TYPE_CHECKING:  # conformance, as mypy sees it
    from unicache.channel.protocol import ChannelParams
    from unicache.channel.server import ChannelServer
    from unicache.host.ports import PerfPort, Publisher, RoundHost

    # the counters are the live host's PerfPort (the port's module imports perf's values,
    # so the check lives here, where the two are joined)
    _perf_conforms: PerfPort = PerfCounters(hardware=False)

    # the channel server is the live host's Publisher; host and channel are sibling
    # layers that must not import each other, so the daemon, which joins them, checks it
    _publisher: Publisher = ChannelServer(Path())
    _round_host: RoundHost = _DaemonHost.__new__(_DaemonHost)
