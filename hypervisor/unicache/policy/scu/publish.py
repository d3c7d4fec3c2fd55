"""SCU's tables each round: which VMs' placement tables to keep, patch or build again, and
the tables to publish (MFC §4.2: the guest's shim migrates readers by its VM's table).

A host tracks up to a million chunks, of which a round changes a few thousand, so a VM
keeps its table when nothing it is built on changed (its chunks, its vCPUs' units, its
standing, its colors and replicas), gets only its changed chunks' entries again when
only they changed (:func:`~unicache.policy.scu.table.patched_entries`), and is built
from all its chunks otherwise; each gives the table a full build would
(``tests/policy/test_round_incremental.py``). A table is published only when it
changed. Pure: no I/O, no clock, no threads.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from unicache.model import ChunkDecision, PlacementEntry, PlacementTable, PublishPlacement
from unicache.policy.scu.mfc import MfcTable
from unicache.policy.scu.mfc_state import ChunkKey
from unicache.policy.scu.options import ScuOptions
from unicache.policy.scu.table import NO_EXTRAS, VmExtras, patched_entries, placement_entries

#: what a VM's table is built on besides its chunks and extras: left alone, and its
#: ``(vCPU index, unit)`` pairs
TableBasis = tuple[bool, tuple[tuple[int, int], ...]]


@dataclass(frozen=True, slots=True)
class TablesBuilt:
    """The tables published so far and what each was built on (``ScuState``'s fields).

    :param versions: VM -> version of the last table published to it.
    :param published: VM -> the entries of that table.
    :param built_on: VM -> its standing and ``(vCPU index, unit)`` pairs then.
    :param built_extras: VM -> the colors and replicas it was built with.
    :param actions: the tables to publish this round.
    """

    versions: Mapping[str, int]
    published: Mapping[str, tuple[PlacementEntry, ...]]
    built_on: Mapping[str, TableBasis]
    built_extras: Mapping[str, VmExtras]
    actions: list[PublishPlacement] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class TableInputs:
    """This round's inputs of the tables besides the MFC table's chunks.

    :param live: the VMs on the host.
    :param left_alone: VMs SCU leaves alone (their tables hold only colors and replicas).
    :param units_of: per VM, vCPU index -> its unit.
    :param extras: per VM, the colors (SRM) and replicas (NCC) of its chunks.
    :param touched: VMs whose reads were replayed this round.
    :param aging: whether this round aged the MFC table.
    """

    live: frozenset[str] | set[str]
    left_alone: frozenset[str]
    units_of: Mapping[str, Mapping[int, int]]
    extras: Mapping[str, VmExtras]
    touched: set[str]
    aging: bool


def publish_tables(
    before: TablesBuilt,
    table: MfcTable,
    inputs: TableInputs,
    decisions: list[ChunkDecision],
    opts: ScuOptions,
    budget: Callable[[int], int],
) -> TablesBuilt:
    """Every live VM's table this round, and the tables to publish.

    :param before: the tables of the last round.
    :param table: this round's MFC table.
    :param inputs: what else the tables are built on.
    :param decisions: this round's chunk decisions (their rules name why a table changed).
    :param opts: SCU's options.
    :param budget: a chunk's migration budget from its size (§4.5).
    """
    live, left_alone = inputs.live, inputs.left_alone
    versions = dict(before.versions)
    published = dict(before.published)
    built_on = {vm: b for vm, b in before.built_on.items() if vm in live}
    built_extras = {vm: e for vm, e in before.built_extras.items() if vm in live}
    actions = []
    changed = table.changed_vms() | inputs.touched
    if inputs.aging:
        # an aging halves every count, which keeps the tables the same (an entry holds no
        # count; the table store marks the VMs whose chunks it forgot or whose use it
        # emptied) except where a table is cut to its most used chunks: halving with
        # rounding down can tie or swap two chunks' total use
        changed |= {vm for vm in live if table.count_of(vm) > opts.max_entries}
    rules_of: dict[str, Counter[str]] = {}
    for d in decisions:
        rules_of.setdefault(d.vm, Counter())[d.rule] += 1
    for vm in sorted(live):
        units = inputs.units_of.get(vm, {})
        basis: TableBasis = (vm in left_alone, tuple(sorted(units.items())))
        vm_extras = inputs.extras.get(vm, NO_EXTRAS)
        # a table built empty was never published (nothing to send): it is still known,
        # so an unchanged VM without one (most VMs SCU leaves alone) costs no build
        previous = published.get(vm, () if vm in built_on else None)
        built = built_extras.get(vm)
        same_units = previous is not None and built_on.get(vm) == basis
        same_extras = built is not None and _same_extras(built, vm_extras)
        if same_units and same_extras and vm not in changed:
            continue  # nothing its table is built on changed: the same table again
        built_on[vm] = basis
        built_extras[vm] = vm_extras
        entries = _entries(
            vm, previous, built, same_units, vm_extras, units, table, vm in left_alone, opts, budget
        )
        if vm not in inputs.touched and (previous or ()) == entries:
            continue  # an empty table for a VM without one, unread: nothing to publish
        if previous == entries:
            continue
        versions[vm] = versions.get(vm, 0) + 1
        published[vm] = entries
        rules = rules_of.get(vm, Counter())
        summary = ", ".join(f"{rule} x{n}" for rule, n in sorted(rules.items()))
        table_msg = PlacementTable(
            vm, versions[vm], opts.chunk_size, opts.params.min_read_size, entries
        )
        why = "left alone: no migration" if vm in left_alone else summary or "aging only"
        reason = f"SCU placement: {len(entries)} chunks ({why})"
        actions.append(PublishPlacement(vm, table_msg, reason))
    for vm in list(published):
        if vm not in live:
            del published[vm]
            versions.pop(vm, None)
            built_on.pop(vm, None)
            built_extras.pop(vm, None)
    return TablesBuilt(versions, published, built_on, built_extras, actions)


def _entries(
    vm: str,
    previous: tuple[PlacementEntry, ...] | None,
    built: VmExtras | None,
    same_units: bool,
    vm_extras: VmExtras,
    units: Mapping[int, int],
    table: MfcTable,
    alone: bool,
    opts: ScuOptions,
    budget: Callable[[int], int],
) -> tuple[PlacementEntry, ...]:
    """A VM's table this round: the previous one patched where only some chunks or their
    extras changed, else built again (``alone``: SCU leaves the VM alone, so only what SRM
    and NCC add, no migration)."""
    patchable = (
        same_units
        and previous is not None
        and built is not None
        and not built.adds_nothing_somewhere()
        and not vm_extras.adds_nothing_somewhere()
    )
    if patchable and previous is not None and built is not None and alone:
        # a table of colors and replicas only: the entries of the chunks whose
        # extras changed again, the others kept
        entries = patched_entries(
            previous,
            [(c, None) for c in vm_extras.changed_since(built)],
            units,
            vm_extras,
            budget,
            opts.params.min_read_size,
        )
    elif (
        patchable
        and previous is not None
        and built is not None
        and len(previous) < opts.max_entries  # neither table cut: each entry is its
        and table.count_of(vm) <= opts.max_entries  # chunk's alone
    ):
        # only some chunks or their extras changed: their entries again, the others
        # kept
        again = table.changed_chunks(vm) | vm_extras.changed_since(built)
        entries = patched_entries(
            previous,
            [(c, table.chunk(ChunkKey(vm, c))) for c in again],
            units,
            vm_extras,
            budget,
            opts.params.min_read_size,
        )
    else:
        # a VM SCU leaves alone keeps only what SRM and NCC add (no migration)
        mine = [] if alone else table.chunks_of(vm)
        entries = placement_entries(
            mine, units, vm_extras, budget, opts.params.min_read_size, opts.max_entries
        )
    return entries


def _same_extras(built: VmExtras, extras: VmExtras) -> bool:
    """Whether a table built with ``built`` carries exactly ``extras`` (SRM's colors,
    NCC's replicas)."""
    if extras.adds_nothing_somewhere():
        return False  # an extra that adds nothing cannot be told from its absence: rebuild
    return built == extras
