"""The typed model every part of unicache shares: what is observed, and what is decided.

All classes are small frozen dataclasses. Hosts (live, replayed or simulated) build the
observed ones (:mod:`.observed`: VMs, vCPUs, chunks, samples, reports, the
:class:`Observation`); policies read them and return the decided ones (:mod:`.decided`:
placement tables, actions, refusals, the :class:`Decision`), which hosts carry out.
"""

from unicache.model.decided import (
    BUDGET_UNLIMITED,
    TABLE_ACTIONS,
    Action,
    ActionKind,
    AssignColor,
    ChunkDecision,
    Decision,
    DropReplica,
    PinVcpu,
    PlacementEntry,
    PlacementTable,
    PublishPlacement,
    Refusal,
    ReleaseVcpu,
    Replicate,
    SetCpuWeight,
)
from unicache.model.observed import (
    ID_SPACE,
    MAX_FILE_ID,
    AgentHealth,
    ChunkAccess,
    ChunkId,
    CounterSample,
    CounterSource,
    GuestNode,
    GuestReport,
    NodeMemory,
    Observation,
    Vcpu,
    VcpuId,
    Vm,
)

__all__ = [
    "BUDGET_UNLIMITED",
    "ID_SPACE",
    "MAX_FILE_ID",
    "TABLE_ACTIONS",
    "Action",
    "ActionKind",
    "AgentHealth",
    "AssignColor",
    "ChunkAccess",
    "ChunkDecision",
    "ChunkId",
    "CounterSample",
    "CounterSource",
    "Decision",
    "DropReplica",
    "GuestNode",
    "GuestReport",
    "NodeMemory",
    "Observation",
    "PinVcpu",
    "PlacementEntry",
    "PlacementTable",
    "PublishPlacement",
    "Refusal",
    "ReleaseVcpu",
    "Replicate",
    "SetCpuWeight",
    "Vcpu",
    "VcpuId",
    "Vm",
]
