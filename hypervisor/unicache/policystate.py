"""The policy round's state across daemon restarts: saved each round, restored at start.

What the policies learned (SCU's chunk table and its watch, OBS's units and weights, the
step-aside and trust counts, SRM's sequences and NCC's replicas and counters) survives a
restart, so a VM the watch saw lose under placement is not placed again at once, and a
table's version never goes back (a guest applies only newer ones). What the shutdown
undid does not survive: the daemon restores every pin and weight it changed and its
guest channels start afresh, so :func:`after_restart` drops OBS's record of pins and
weights set (OBS pins and credits again in the first round), OBS's last rebalance (a tick
of the stopped daemon's count) and SCU's record of tables sent and of what they were
built on (it sends each VM's table again).

The state goes through the project's one checkpoint (:class:`unicache.statefile.Checkpoint`:
whole, 0600, checksummed), as JSON that ``cattrs`` converts from and to the frozen
dataclasses: a map whose keys are not text becomes a list of pairs, a set a list, SCU's
:class:`~unicache.policy.scu.mfc.MfcTable` its parameters, units, tenants and chunks (the
sums it keeps are rebuilt from them). A state file that
is torn, edited, of another version or that the policies refuse (``Policy.start``) is
set aside with one line, and the daemon starts afresh.
"""

from __future__ import annotations

import typing
from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from dataclasses import replace
from pathlib import Path
from typing import Any

import cattrs
import cattrs.gen

from unicache.errors import StateError
from unicache.policy.round import RoundState
from unicache.policy.scu.mfc import MfcTable
from unicache.policy.scu.mfc_state import (
    ChunkKey,
    ChunkState,
    MfcParams,
    UnitView,
    use_map,
    use_pairs,
)
from unicache.policy.scu.policy import ScuState
from unicache.statefile import Checkpoint

#: the checkpoint's kind and format version
STATE_KIND = "round-state"
STATE_VERSION = 2  # 2: SRM's seen chunks carry their bytes
#: the file under the daemon's state directory
STATE_FILE = "round-state.json"


def _text_keys(cls: Any) -> bool:
    args = typing.get_args(cls)
    return not args or args[0] in (str, int)


def _is_mapping(cls: Any) -> bool:
    origin = typing.get_origin(cls) or cls
    return isinstance(origin, type) and issubclass(origin, Mapping)


def _converter() -> cattrs.Converter:
    # sets become lists (JSON has no set, and a set of vCPU records is not hashable)
    conv = cattrs.Converter(unstruct_collection_overrides={AbstractSet: list})

    # a map keyed by a vCPU, a chunk or a node pair: a list of [key, value] pairs
    def unstructure_pairs(cls: Any) -> Any:
        key_type, value_type = typing.get_args(cls) or (Any, Any)
        return lambda m: [
            [conv.unstructure(k, key_type), conv.unstructure(v, value_type)] for k, v in m.items()
        ]

    def structure_pairs(cls: Any) -> Any:
        key_type, value_type = typing.get_args(cls)
        return lambda pairs, _: {
            conv.structure(k, key_type): conv.structure(v, value_type) for k, v in pairs
        }

    def keyed(cls: Any) -> bool:
        return _is_mapping(cls) and not _text_keys(cls)

    conv.register_unstructure_hook_factory(keyed, unstructure_pairs)
    conv.register_structure_hook_factory(keyed, structure_pairs)

    def unstructure_table(table: MfcTable) -> dict[str, Any]:
        return {
            "params": conv.unstructure(table.params),
            "units": conv.unstructure(list(table.units.values()), list[UnitView]),
            "tenants": conv.unstructure(table.tenants, dict[int, frozenset[str]]),
            "chunks": conv.unstructure(table.chunks, dict[ChunkKey, ChunkState]),
        }

    def structure_table(doc: Any, _: Any) -> MfcTable:
        table = MfcTable(
            conv.structure(doc["params"], MfcParams),
            conv.structure(doc["units"], list[UnitView]),
            conv.structure(doc["tenants"], dict[int, frozenset[str]]),
        )
        for key, chunk in conv.structure(doc["chunks"], dict[ChunkKey, ChunkState]).items():
            table.restore_chunk(key, chunk)
        return table

    # a chunk's counts are saved current (the table's view), without the agings they are
    # current to, and its use as the map ``use`` (unit -> count) it was before the pairs:
    # the file holds what it held before aging was lazy, and loads as before
    def unstructure_use(pairs: tuple[int, ...]) -> Any:
        return conv.unstructure(use_map(pairs))

    def structure_use(doc: Any, _: Any) -> tuple[int, ...]:
        return use_pairs(conv.structure(doc, dict[int, int]))

    saved_use = cattrs.gen.override(
        rename="use", unstruct_hook=unstructure_use, struct_hook=structure_use
    )
    omit = cattrs.gen.override(omit=True)

    def fields_as(cls: Any, **overrides: Any) -> None:
        # both ways, with the same fields renamed or left out
        gen = cattrs.gen
        conv.register_unstructure_hook(cls, gen.make_dict_unstructure_fn(cls, conv, **overrides))
        conv.register_structure_hook(cls, gen.make_dict_structure_fn(cls, conv, **overrides))

    fields_as(ChunkState, aged=omit, use_pairs=saved_use)
    conv.register_unstructure_hook(MfcTable, unstructure_table)
    conv.register_structure_hook(MfcTable, structure_table)
    # what SCU's published tables were built on is not saved (the restart publishes every
    # table again, after_restart); a file that holds it, of an earlier build, loads
    fields_as(ScuState, built_on=omit, built_extras=omit)
    return conv


_CONVERTER = _converter()


def encode(state: RoundState) -> Any:
    """The state as JSON-ready data."""
    return _CONVERTER.unstructure(state, RoundState)


def decode(doc: Any) -> RoundState:
    """The state from :func:`encode`'s data.

    :raises StateError: if the data does not make a state (edited, or of another build).
    """
    try:
        return _CONVERTER.structure(doc, RoundState)
    except (cattrs.BaseValidationError, KeyError, TypeError, ValueError) as err:
        raise StateError.restored(f"the saved round state does not decode ({err})") from err


def after_restart(state: RoundState) -> RoundState:
    """What survives a restart: what the policies learned, not what the shutdown undid."""
    return replace(
        state,
        obs=replace(state.obs, pinned=frozenset(), cpu_weights={}, last_rebalance=0),
        scu=replace(state.scu, published={}, built_on={}, built_extras={}),
    )


def checkpoint(state_dir: Path) -> Checkpoint:
    """The round state's checkpoint under the daemon's state directory."""
    return Checkpoint(state_dir / STATE_FILE, STATE_KIND, STATE_VERSION)


def save(state_dir: Path, state: RoundState) -> None:
    """Save the state (whole, 0600, checksummed).

    :raises OSError: when the file cannot be written.
    """
    checkpoint(state_dir).save(encode(state))


def load(state_dir: Path) -> RoundState | None:
    """The saved state as it stands after a restart (:func:`after_restart`), or ``None``.

    :raises StateError: if the file is torn, edited, of another version or does not decode.
    """
    doc = checkpoint(state_dir).load()
    return None if doc is None else after_restart(decode(doc))
