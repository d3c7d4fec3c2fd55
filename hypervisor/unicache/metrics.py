"""Prometheus metrics of the daemon (prometheus-client), one registry per daemon.

Exposed on ``--metrics-port`` (default off). Metric names carry the ``unicache_`` prefix;
the counter source of every cache weight is a label, so a dashboard never mixes
hardware miss rates with software estimates without saying so.
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

from unicache.host.ports import ActResult
from unicache.model import Observation
from unicache.policy.round import RoundState, UnicachePolicy


class DaemonMetrics:
    """The daemon's metrics.

    :param registry: where they are registered (a fresh one by default).
    """

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.cache_weight = Gauge(
            "unicache_vcpu_cache_weight",
            "OBS cache weight of a vCPU over the last interval",
            ["vm", "vcpu", "unit", "source"],
            registry=self.registry,
        )
        self.unit_load = Gauge(
            "unicache_unit_cache_load",
            "Sum of the cache weights of a unit's vCPUs",
            ["unit"],
            registry=self.registry,
        )
        self.unit_vcpus = Gauge(
            "unicache_unit_vcpus", "vCPUs placed in a unit", ["unit"], registry=self.registry
        )
        self.unit_assigned = Gauge(
            "unicache_unit_assigned_bytes",
            "Chunk bytes SCU assigned to a unit (MFC eq. 2)",
            ["unit"],
            registry=self.registry,
        )
        self.actions = Counter(
            "unicache_actions", "Actions carried out, by kind", ["kind"], registry=self.registry
        )
        self.failed = Counter(
            "unicache_actions_failed",
            "Actions that failed, by kind",
            ["kind"],
            registry=self.registry,
        )
        self.channel_errors = Gauge(
            "unicache_channel_errors",
            "Protocol errors of a VM's guest channel, by kind",
            ["vm", "kind"],
            registry=self.registry,
        )
        self.colored_chunks = Gauge(
            "unicache_colored_chunks",
            "Chunks whose page cache SRM-buffer confines to a colored guest node",
            ["vm"],
            registry=self.registry,
        )
        self.replicas = Gauge(
            "unicache_replicas",
            "Node-local replicas NCC keeps, by VM and guest node",
            ["vm", "node"],
            registry=self.registry,
        )
        self.channel_bytes = Gauge(
            "unicache_channel_bytes",
            "Bytes a VM's guest channel carried since the daemon started, by direction "
            "(in: from the guest; out: queued to it)",
            ["vm", "direction"],
            registry=self.registry,
        )
        self.rounds = Counter("unicache_rounds", "Policy rounds run", registry=self.registry)

    def serve(self, port: int, addr: str = "127.0.0.1") -> None:
        """Serve ``/metrics`` over HTTP on ``addr:port`` (loopback by default)."""
        start_http_server(port, addr=addr, registry=self.registry)

    def update(
        self,
        policy: UnicachePolicy,
        state: RoundState,
        obs: Observation,
        result: ActResult,
        channel_errors: Iterable[tuple[str, str, int]] = (),
        channel_bytes: Iterable[tuple[str, int, int]] = (),
    ) -> None:
        """Refresh every metric after a round.

        :param channel_errors: per VM, (vm, error kind, count).
        :param channel_bytes: per VM, (vm, bytes in, bytes out) since start.
        """
        self.rounds.inc()
        sources = {s.vcpu: str(s.source) for s in obs.samples}
        self.cache_weight.clear()
        for vcpu, unit in state.obs.unit_of.items():
            self.cache_weight.labels(
                vcpu.vm, str(vcpu.index), str(unit), sources.get(vcpu, "none")
            ).set(state.obs.weights.get(vcpu, 0.0))
        table = state.scu.table
        for cache_unit in policy.units:
            uid = cache_unit.id
            members = [v for v, u in state.obs.unit_of.items() if u == uid]
            load = sum(state.obs.weights.get(v, 0.0) for v in members)
            self.unit_load.labels(str(uid)).set(load)
            self.unit_vcpus.labels(str(uid)).set(len(members))
            self.unit_assigned.labels(str(uid)).set(
                0 if table is None else table.assigned_bytes(uid)
            )
        self.colored_chunks.clear()
        for colors in state.colors.vms:
            self.colored_chunks.labels(colors.vm).set(len(colors.colored))
        self.replicas.clear()
        for held in state.replicas.vms:
            per_node: dict[int, int] = {}
            for replica in held.ncc.replicas:
                per_node[replica.node] = per_node.get(replica.node, 0) + 1
            for node, count in sorted(per_node.items()):
                self.replicas.labels(held.vm, str(node)).set(count)
        for action in result.applied:
            self.actions.labels(str(action.kind)).inc()
        for action, _ in result.failed:
            self.failed.labels(str(action.kind)).inc()
        for vm, kind, count in channel_errors:
            self.channel_errors.labels(vm, kind).set(count)
        for vm, bytes_in, bytes_out in channel_bytes:
            self.channel_bytes.labels(vm, "in").set(bytes_in)
            self.channel_bytes.labels(vm, "out").set(bytes_out)
