"""A VM whose guest booted again: what its old guest taught the policies is dropped.

MFC §4.2 keeps "per-file information" (``f.cores``, ``f.use[a]``) for each file ``f``. A
guest's file ids are salted per boot (docs/agent.md "File ids"), so after a reboot the
chunks SCU remembers for the VM, the table it last published, the watch's read rates,
SRM's seen and colored chunks and NCC's replicas all name files of a guest that no longer
runs. The agent's hello names its id space (a one-way digest of the salt,
docs/protocol.md "hello"), and every report carries it; when it is not the one the state
was learned under, the round starts the VM afresh; and every table is stamped with the
id space its file ids come from, so a table restored after a daemon restart is not sent to
a guest that booted meanwhile (``GuestSession``). What the host did to the VM's vCPUs
(OBS's units and weights) is the host's and stays. The version of the VM's last table
stays too, so a table's version never goes back. Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import TypeVar

from unicache.model import Action, GuestReport, PublishPlacement, Refusal
from unicache.policy.ncc.replicas import ReplicaState
from unicache.policy.scu.policy import ScuState
from unicache.policy.srm.colors import ColorState

V = TypeVar("V")

#: the decision log's kind for a VM whose learned state was dropped
GUEST_BOOTED = "GUEST_BOOTED"


@dataclass(frozen=True, slots=True)
class GuestState:
    """The guest-taught parts of a round's state, and the id space each VM's were learned
    under.

    :param scu: SCU's state.
    :param colors: SRM-buffer's state.
    :param replicas: NCC's state.
    :param id_spaces: VM -> the id space of the guest whose reports the state holds.
    """

    scu: ScuState
    colors: ColorState
    replicas: ReplicaState
    id_spaces: Mapping[str, str]


def new_guests(reports: Iterable[GuestReport], id_spaces: Mapping[str, str]) -> dict[str, str]:
    """The VMs whose reports come from another guest than the state's, with its id space
    (a report without one, from an agent that does not say, changes nothing)."""
    fresh: dict[str, str] = {}
    for report in reports:
        if report.id_space and id_spaces.get(report.vm) != report.id_space:
            fresh[report.vm] = report.id_space
    return fresh


def forget_guests(
    state: GuestState, reports: Iterable[GuestReport], live_vms: frozenset[str]
) -> tuple[GuestState, tuple[Refusal, ...]]:
    """The state with every VM whose guest is new started afresh, and the id spaces of VMs
    no longer on the host forgotten (a VM that comes back has booted again anyway).

    :param live_vms: the VMs on the host this round.
    :returns: the new state, and one log line per VM that had something to forget.
    """
    if any(vm not in live_vms for vm in state.id_spaces):
        state = replace(state, id_spaces=_kept(state.id_spaces, live_vms))
    fresh = new_guests((r for r in reports if r.vm in live_vms), state.id_spaces)
    if not fresh:
        return state, ()
    scu, colors, replicas = state.scu, state.colors, state.replicas
    table = scu.table
    if table is not None and any(table.count_of(vm) for vm in fresh):
        table = table.copy()  # a round's input is never changed; copied only to forget
    notes: list[Refusal] = []
    for vm in sorted(fresh):
        chunks = table.forget_vm(vm) if table is not None and table.count_of(vm) else 0
        held = (
            chunks
            or vm in scu.published
            or vm in scu.watched
            or colors.of(vm) is not None
            or replicas.of(vm) is not None
        )
        if not held:
            continue
        was = state.id_spaces.get(vm)
        whose = (
            f"{vm}'s guest booted again (file-id space {fresh[vm]}, was {was})"
            if was
            else f"{vm}'s guest names its file-id space ({fresh[vm]}) for the first time"
        )
        notes.append(
            Refusal(
                GUEST_BOOTED,
                f"{whose}: forgot its {chunks} chunks, its table, its watch, colors and "
                "replicas",
            )
        )
    gone = frozenset(fresh)
    scu = replace(
        scu,
        table=table,
        published=_without(scu.published, gone),
        aside=scu.aside - gone,
        watched=_without(scu.watched, gone),
        doubts=_without(scu.doubts, gone),
        trusts=_without(scu.trusts, gone),
        built_on=_without(scu.built_on, gone),
        built_extras=_without(scu.built_extras, gone),
    )
    colors = replace(colors, vms=tuple(v for v in colors.vms if v.vm not in gone))
    replicas = replace(replicas, vms=tuple(v for v in replicas.vms if v.vm not in gone))
    return GuestState(scu, colors, replicas, {**state.id_spaces, **fresh}), tuple(notes)


def stamp_tables(actions: tuple[Action, ...], id_spaces: Mapping[str, str]) -> tuple[Action, ...]:
    """The actions with each table stamped with the id space its file ids come from, so
    that a guest of another boot is never sent it (``GuestSession``): a table restored
    after a restart goes out before the new guest's first report says it booted again."""
    return tuple(
        replace(a, table=replace(a.table, id_space=id_spaces[a.vm]))
        if isinstance(a, PublishPlacement) and id_spaces.get(a.vm)
        else a
        for a in actions
    )


def _without(mapping: Mapping[str, V], gone: frozenset[str]) -> dict[str, V]:
    return {vm: v for vm, v in mapping.items() if vm not in gone}


def _kept(mapping: Mapping[str, V], live: frozenset[str]) -> dict[str, V]:
    return {vm: v for vm, v in mapping.items() if vm in live}
