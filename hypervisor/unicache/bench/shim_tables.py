"""Table states of ``unicache bench shim``: the placement tables its cells run under.

* ``placed``: the bench file's chunks are entries of a table of :data:`TABLE_ENTRIES`
  entries (the agent's limit), every entry's home vCPUs every CPU, so the shim looks each
  read's chunk up and counts it, and never needs to migrate the thread;
* ``unplaced``: as many entries, all of other file ids (files of as many chunks as the bench
  file), the bench file named by none: the shim looks up and finds nothing;
* ``none``: ``UNICACHE_TABLE`` names a path that does not exist (no agent);
* ``unplaced/<sample>``, one per open sample of :data:`OPEN_SAMPLES`: the unplaced table
  again, its buffer carrying that ``OpenSample`` (which opens of small files the shim
  counts), for the files cells (shim_files.py). A table buffer carries one sample, so each
  sample is a table of its own.

The tables are made with the guest agent's public API (``unicache_agent.shm``,
``table_writer`` and ``counters``), as the agent makes them, so they follow its layout
when it changes; the writer and harvester objects stay alive while the cells run (they
own the mappings).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from unicache.errors import BenchError

TABLE_STATES = ("placed", "unplaced", "none")
#: the open samples the files cells run under: the agent's opt-in (one in 8 read-only opens
#: of files up to 256 KiB counted), every open counted (the agent's default), and
#: practically none (one in 2^15)
OPEN_SAMPLES = ("sampled", "every", "never")
#: entries of the placed and unplaced tables (the agent's limit, protocol.MAX_TABLE_ENTRIES)
TABLE_ENTRIES = 8192
CHUNK_SIZE = 256 * 1024
MIN_READ_SIZE = 64 * 1024
#: the bench file: 64 chunks
FILE_SIZE = 16 * 1024 * 1024
#: inode numbers of the filler entries' files: no real file of the bench's device has them
_FAKE_INO = 1 << 40


def open_sample(shm: Any, name: str) -> Any:
    """The agent's ``OpenSample`` called ``name`` (of :data:`OPEN_SAMPLES`)."""
    never = shm.OpenSample(256 * 1024, shm.SAMPLE_SHIFT_MAX)
    return {"sampled": shm.SMALL_FILES_SAMPLE, "every": shm.EVERY_OPEN, "never": never}[name]


def sampled_state(sample: str) -> str:
    """The table state of the files cells under the open sample ``sample``."""
    return f"unplaced/{sample}"


@dataclass(frozen=True, slots=True)
class TableState:
    """One table state, set up.

    :param name: ``placed``, ``unplaced``, ``none`` or ``unplaced/<sample>``.
    :param env: its ``UNICACHE_TABLE`` and ``UNICACHE_COUNTERS``.
    :param entries: entries published (0: no table).
    :param file_id: the bench file's id under this table's salt (0: no table).
    :param table: the agent-side writer (None for ``none``).
    :param harvester: the agent-side counters harvester (None for ``none``).
    :param sample: the ``OpenSample`` its buffer carries (None for ``none``).
    """

    name: str
    env: dict[str, str]
    entries: int
    file_id: int
    table: Any
    harvester: Any
    sample: Any = None

    def reads_of_file(self) -> int:
        """Reads of the bench file the shims counted since the last call (harvests)."""
        if self.harvester is None:
            return 0
        return sum(c.reads for c in self.harvester.harvest(0).chunks
                   if c.file_id == self.file_id)

    def reads_counted(self) -> int:
        """Reads of any file the shims counted since the last call (harvests): under an
        ``unplaced/<sample>`` table, the files cells' reads."""
        if self.harvester is None:
            return 0
        return sum(c.reads for c in self.harvester.harvest(0).chunks)


def _filler(shm: Any, salt: int, dev: int, count: int, homes: frozenset[int]) -> list[Any]:
    chunks = FILE_SIZE // CHUNK_SIZE
    return [shm.ShmEntry(shm.file_id_of(salt, dev, _FAKE_INO + i // chunks), i % chunks,
                         homes, caching=True, migration_budget=shm.BUDGET_UNLIMITED)
            for i in range(count)]


def _publish(shm: Any, counters: Any, writer: Any, directory: Path, name: str,
             data: Path, sample: Any = None) -> TableState:
    """The table state ``name``; an ``unplaced`` table (``sample`` None: the writer's
    default, every open counted) carries ``sample``."""
    stem = name.replace("/", "-")
    table_path, counters_dir = directory / f"{stem}-table", directory / f"{stem}-counters"
    env = {"UNICACHE_TABLE": str(table_path), "UNICACHE_COUNTERS": str(counters_dir)}
    if name == "none":
        return TableState(name, env, 0, 0, None, None)
    layout = shm.CounterLayout.of()
    sample = shm.EVERY_OPEN if sample is None else sample
    table = writer.TableWriter(str(table_path), counters=layout, sample=sample)
    harvester = counters.CounterHarvester(str(counters_dir), layout)
    st = data.stat()
    fid = shm.file_id_of(table.salt, st.st_dev, st.st_ino)
    homes = frozenset(range(os.cpu_count() or 1))
    size = min(TABLE_ENTRIES, table.capacity)
    own = ([shm.ShmEntry(fid, c, homes, caching=True, migration_budget=shm.BUDGET_UNLIMITED)
            for c in range(FILE_SIZE // CHUNK_SIZE)] if name == "placed" else [])
    entries = own + _filler(shm, table.salt, st.st_dev, size - len(own), homes)
    published = table.publish(1, CHUNK_SIZE, MIN_READ_SIZE, entries)
    return TableState(name, env, published, fid, table, harvester, sample)


class BenchTables:
    """The table states of one run, in ``directory`` (closed with :meth:`close`).

    :param shm: the agent's ``unicache_agent.shm`` module.
    :param counters: its ``unicache_agent.counters`` module.
    :param writer: its ``unicache_agent.table_writer`` module.
    :param directory: where the tables and counters go.
    :param data: the bench file.
    :param names: the states to set up (of :data:`TABLE_STATES`).
    :param samples: open samples (of :data:`OPEN_SAMPLES`) to set up an unplaced table
        for, each the state :func:`sampled_state` names.
    :raises BenchError: when the agent's API refuses a table.
    """

    def __init__(self, shm: Any, counters: Any, writer: Any, directory: Path, data: Path,
                 names: tuple[str, ...], samples: tuple[str, ...] = ()) -> None:
        self.states: dict[str, TableState] = {}
        wanted = [(n, None) for n in names] + [(sampled_state(s), s) for s in samples]
        try:
            for name, sample in wanted:
                self.states[name] = _publish(
                    shm, counters, writer, directory, name, data,
                    None if sample is None else open_sample(shm, sample))
        except (OSError, shm.ShmError) as err:
            self.close()
            raise BenchError(f"cannot set up the {name} table") from err

    def close(self) -> None:
        """Unmap the tables and counters (ours: a failure here is a bug to see)."""
        for state in self.states.values():
            if state.table is not None:
                state.table.close()
                state.harvester.close()
        self.states.clear()
