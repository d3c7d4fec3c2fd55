"""The guest's replica memory: what one NCC replica costs a node, and a node's budget.

The dual-layered file cache paper keeps one NCC entry per page and node (§3.1), charged to
the node's memory and shrunk first when memory is tight (§3.2 "Hooks for reclaiming").
The guest agent keeps one replica file per replicated chunk and node, shared by every
process on the guest (docs/replicas.md "Guest enforcement"): a header page, then the
chunk's bytes in whole pages. It caps each node's replicas at ``REPLICA_BUDGET_RATIO`` of
the node's memory. The simulator charges its replicas with the same functions, so its
memory figure is the product's; a test holds them to the agent's own
(``guest-agent/unicache_agent/replica_files.py``, ``replica_store.py``).
"""

from __future__ import annotations

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
