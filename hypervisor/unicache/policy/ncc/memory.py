"""The guest's replica memory: what one NCC replica costs a node, and a node's budget.

The dual-layered file cache paper keeps one NCC entry per page and node (§3.1), charged to
the node's memory and shrunk first when memory is tight (§3.2 "Hooks for reclaiming").
The guest agent keeps one replica file per replicated chunk and node, shared by every
process on the guest (docs/replicas.md "Guest enforcement"): a header page, then the
chunk's bytes in whole pages. It caps each node's replicas at ``REPLICA_BUDGET_RATIO`` of
the node's memory. The host's NCC round asks a node for no more replicas than that budget
holds (:func:`budgeted`: NCC's ``max_replicas_per_node``, §3.2's capacity), so the agent
never has to refuse a replica for want of room; the simulator drives the same round with
the same parameters and charges its replicas with the same functions, so its memory
figure is the product's. A test holds them to the agent's own
(``guest-agent/unicache_agent/replica_files.py``, ``replica_store.py``).

When a node's free share is below the §3.2 timer's floor, the agent frees ``ceil(2n/3)`` of
the ``n`` pages it lacks from its replicas (the 2:1 shrink); :func:`shrink_reclaims` turns
the same shortfall into NCC's ``Reclaim`` events, so the host's round drops the same share
of replicas in its MQ order and its table stops listing what the agent gave back.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from unicache.model import NodeMemory
from unicache.policy.ncc.cache import NccParams, Reclaim

#: the agent's default replica budget per node, a share of the node's memory (issue #20:
#: replicas may cost at most 10 % memory)
REPLICA_BUDGET_RATIO = 0.10
#: a replica file's header, one page before the chunk's bytes (uc_layout.h UC_REP_DATA_OFF)
REPLICA_HEADER_BYTES = 4096
#: the guest's page size the files are charged in
GUEST_PAGE_BYTES = 4096


def replica_bytes(length: int) -> int:
    """Node memory one replica of ``length`` bytes holds: its header page and data pages.

    :param length: bytes of the chunk it holds.
    :returns: bytes.
    """
    return REPLICA_HEADER_BYTES + -(-length // GUEST_PAGE_BYTES) * GUEST_PAGE_BYTES


def replica_budget(node_bytes: int, ratio: float = REPLICA_BUDGET_RATIO) -> int:
    """A node's replica budget: ``ratio`` of its memory, in whole pages.

    :param node_bytes: the node's memory.
    :param ratio: the share (the agent's ``--replica-budget`` / 100).
    :returns: bytes.
    """
    return int(node_bytes * ratio) // GUEST_PAGE_BYTES * GUEST_PAGE_BYTES


def replica_capacity(node_bytes: int, chunk_size: int, ratio: float = REPLICA_BUDGET_RATIO) -> int:
    """Whole-chunk replicas a node's budget holds (NCC's ``max_replicas_per_node``).

    :param node_bytes: the node's memory.
    :param chunk_size: bytes per chunk.
    :param ratio: the budget's share.
    :returns: replicas.
    """
    return replica_budget(node_bytes, ratio) // replica_bytes(chunk_size)


def budgeted(
    params: NccParams,
    node_bytes: Iterable[int],
    chunk_size: int,
    ratio: float = REPLICA_BUDGET_RATIO,
) -> NccParams:
    """NCC's parameters with a node's capacity at most what the agent's budget holds on the
    smallest of the nodes (whole-chunk replicas: a shorter last chunk only holds less).

    :param params: the parameters.
    :param node_bytes: the memory of each node that may hold replicas (none: unchanged).
    :param chunk_size: bytes per chunk.
    :param ratio: the budget's share.
    :returns: the parameters, ``max_replicas_per_node`` capped.
    """
    sizes = [n for n in node_bytes if n > 0]
    if not sizes:
        return params
    capacity = replica_capacity(min(sizes), chunk_size, ratio)
    if capacity >= params.max_replicas_per_node:
        return params
    return replace(params, max_replicas_per_node=capacity)


def shrink_reclaims(
    memory: Iterable[NodeMemory], params: NccParams, chunk_size: int
) -> tuple[Reclaim, ...]:
    """§3.2 reclaim hooks driven by the timer: a ``Reclaim`` for each node below the floor.

    A node whose free memory is under ``min_free_ratio`` of its total lacks ``floor - free``
    bytes; in whole replicas of ``chunk_size`` (:func:`replica_bytes`, rounded up) that is
    the ``pages`` of its ``Reclaim``, of which NCC's round drops ``ceil(2n/3)`` replicas in MQ
    order, as the agent's shrink frees ``ceil(2n/3)`` of the pages the node lacks.

    :param memory: free memory per node.
    :param params: NCC's parameters (``min_free_ratio``).
    :param chunk_size: bytes per chunk (positive).
    :returns: one ``Reclaim`` per tight node, by node.
    """
    unit = replica_bytes(chunk_size)
    out = []
    for m in sorted(memory, key=lambda m: m.node):
        floor = int(m.total_bytes * params.min_free_ratio)
        if m.total_bytes > 0 and m.free_bytes < floor:
            out.append(Reclaim(m.node, -(-(floor - m.free_bytes) // unit)))
    return tuple(out)
