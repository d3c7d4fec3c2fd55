"""State files are written whole, mode 0600, and never through a link."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from unicache.errors import StateError
from unicache.statefile import Checkpoint, write_private_json


def test_a_state_file_is_private_and_replaced_whole(tmp_path: Path) -> None:
    path = tmp_path / "state" / "journal.json"
    write_private_json(path, {"a": 1})
    write_private_json(path, {"a": 2})
    assert json.loads(path.read_text()) == {"a": 2}
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in path.parent.iterdir()] == ["journal.json"]


def test_a_leftover_temporary_file_with_another_mode_does_not_leak_it(tmp_path: Path) -> None:
    path = tmp_path / "status.json"
    leftover = tmp_path / "status.json.tmp"
    leftover.write_text("old")
    leftover.chmod(0o644)
    write_private_json(path, [1])
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_a_link_planted_at_the_temporary_name_is_not_followed(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.write_text("keep")
    os.symlink(target, tmp_path / "journal.json.tmp")
    with pytest.raises(OSError):
        write_private_json(tmp_path / "journal.json", {"x": 1})
    assert target.read_text() == "keep"


def test_a_checkpoint_gives_back_what_it_saved_and_refuses_anything_else(
    tmp_path: Path,
) -> None:
    path = tmp_path / "journal.json"
    journal = Checkpoint(path, "affinity-journal", 2, legacy_version=1)
    assert journal.load() is None  # none yet
    journal.save({"affinity": [{"tid": 7, "cpus": [0, 1]}]})
    assert journal.load() == {"affinity": [{"tid": 7, "cpus": [0, 1]}]}
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    saved = json.loads(path.read_text())
    # an edit the checksum does not cover, a torn file, another kind, another version
    saved["payload"]["affinity"][0]["cpus"] = [1]
    path.write_text(json.dumps(saved))
    with pytest.raises(StateError, match="does not match its checksum"):
        journal.load()
    path.write_text(path.read_text()[:40])
    with pytest.raises(StateError, match="unreadable; inspect it, then remove it"):
        journal.load()
    Checkpoint(path, "cgroup-journal", 2).save({"moved": {}})
    with pytest.raises(StateError, match="holds 'cgroup-journal'"):
        journal.load()
    Checkpoint(path, "affinity-journal", 3).save({"affinity": []})
    with pytest.raises(StateError, match="another version"):
        journal.load()


def test_a_checkpoint_reads_the_bare_journal_an_older_version_wrote(tmp_path: Path) -> None:
    path = tmp_path / "journal.json"
    path.write_text(json.dumps({"version": 1, "affinity": []}))
    assert Checkpoint(path, "affinity-journal", 2, legacy_version=1).load() == {
        "version": 1, "affinity": []}
    path.write_text(json.dumps({"version": 0, "affinity": []}))
    with pytest.raises(StateError, match="another version"):
        Checkpoint(path, "affinity-journal", 2, legacy_version=1).load()



def test_a_checkpoint_reads_a_bare_file_of_a_format_that_had_no_version(tmp_path: Path) -> None:
    path = tmp_path / "vm.json"
    path.write_text(json.dumps({"name": "a", "pid": 1}))
    assert Checkpoint(path, "vm-record", 1, legacy_unversioned=True).load() == {
        "name": "a", "pid": 1}
    # without the flag it is a foreign file; a bare file with a version is not this format
    with pytest.raises(StateError, match="holds None, not a vm-record"):
        Checkpoint(path, "vm-record", 1).load()
    path.write_text(json.dumps({"version": 1, "name": "a"}))
    with pytest.raises(StateError, match="holds None, not a vm-record"):
        Checkpoint(path, "vm-record", 1, legacy_unversioned=True).load()
