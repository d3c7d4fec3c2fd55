"""State files are written whole, mode 0600, and never through a link."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from unicache.statefile import write_private_json


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
