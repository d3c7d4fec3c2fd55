"""The decision log: rotated at its size cap, never fatal when it cannot be written, and by
default a summary per guest report and per VM's chunk rules, whatever a guest sends."""

from __future__ import annotations

import errno
import json
import logging
from pathlib import Path

import pytest
from unicache.config import DEFAULT_DECISION_LOG, DaemonConfig, default_decision_log, load_config
from unicache.decisionlog import (
    KEEP_ROTATED,
    DecisionLog,
    chunk_rules_records,
    report_summary_record,
)
from unicache.errors import ConfigError
from unicache.model import ChunkAccess, ChunkDecision, ChunkId, GuestReport
from unicache.readback import explain


def _record(i: int) -> dict[str, object]:
    return {"tick": i, "kind": "note", "message": "x" * 100}


def test_the_log_rotates_at_its_cap_and_keeps_a_bounded_number_of_old_files(
    tmp_path: Path,
) -> None:
    path = tmp_path / "decisions.jsonl"
    log = DecisionLog(path, max_bytes=4096)
    log.open()
    for i in range(1000):  # about 150 KiB of records
        log.write(_record(i))
        log.flush()
    log.close()
    files = sorted(tmp_path.iterdir())
    assert [f.name for f in files] == [
        "decisions.jsonl", *(f"decisions.jsonl.{i}" for i in range(1, KEEP_ROTATED + 1))
    ]
    assert all(f.stat().st_size <= 4096 for f in files)
    last = json.loads(path.read_text().splitlines()[-1])
    assert last["tick"] == 999  # the newest records are in the log itself
    older = json.loads((tmp_path / "decisions.jsonl.1").read_text().splitlines()[-1])
    assert older["tick"] == json.loads(path.read_text().splitlines()[0])["tick"] - 1
    assert log.errors == 0


def test_the_log_and_its_rotated_files_are_private_and_never_written_through_a_link(
    tmp_path: Path,
) -> None:
    # issue #12: decisions.jsonl was 0644; it names VMs and their files' placement
    path = tmp_path / "decisions.jsonl"
    path.write_text("")
    path.chmod(0o644)  # as an older version left it
    log = DecisionLog(path, max_bytes=2048)
    log.open()
    for i in range(100):
        log.write(_record(i))
    log.close()
    assert all(f.stat().st_mode & 0o777 == 0o600 for f in tmp_path.iterdir())
    secret = tmp_path / "secret"
    secret.write_text("keep")
    link = tmp_path / "linked.jsonl"
    link.symlink_to(secret)
    linked = DecisionLog(link)
    linked.open()  # refused (O_NOFOLLOW), counted, never raised
    linked.write(_record(0))
    assert linked.errors == 1 and secret.read_text() == "keep"


def test_a_log_that_cannot_be_opened_is_counted_and_reported_once_never_raised(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    log = DecisionLog(blocker / "decisions.jsonl")
    with caplog.at_level(logging.WARNING):
        log.open()
        for i in range(5):
            log.write(_record(i))
            log.flush()  # tries to open again each round
    assert log.errors == 6
    warnings = [r for r in caplog.records if "cannot be written" in r.getMessage()]
    assert len(warnings) == 1


def test_a_full_disk_drops_the_records_it_cannot_write_and_the_log_goes_on(
    tmp_path: Path,
) -> None:
    path = tmp_path / "decisions.jsonl"
    log = DecisionLog(path)
    log.open()
    log.write(_record(0))
    assert log._out is not None

    def full(_: str) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    log._out.write = full  # type: ignore[method-assign]
    log.write(_record(1))  # dropped, counted
    assert log.errors == 1
    log.flush()  # the next round opens the file again: space came back
    log.write(_record(2))
    log.close()
    ticks = [json.loads(line)["tick"] for line in path.read_text().splitlines()]
    assert ticks == [0, 2]


def test_the_default_log_is_on_disk_unless_another_state_dir_is_given(tmp_path: Path) -> None:
    assert DaemonConfig().log_path == DEFAULT_DECISION_LOG
    assert str(DEFAULT_DECISION_LOG).startswith("/var/log/")
    assert default_decision_log(tmp_path) == tmp_path / "decisions.jsonl"
    assert DaemonConfig(decision_log=tmp_path / "d.jsonl").log_path == tmp_path / "d.jsonl"


def test_log_max_mib_is_checked_in_the_config_file(tmp_path: Path) -> None:
    cfg = tmp_path / "unicache.toml"
    cfg.write_text("log_max_mib = 8\n")
    assert load_config(cfg).log_max_mib == 8
    cfg.write_text("log_max_mib = 0\n")
    with pytest.raises(ConfigError, match="log_max_mib"):
        load_config(cfg)


def _report(chunks: int) -> GuestReport:
    return GuestReport("vm0", 7, 1.0, tuple(
        ChunkAccess(ChunkId(i % 3, i), 4096, 2, 0, ((i % 2, 4096),)) for i in range(chunks)
    ))


def test_by_default_a_report_is_one_summary_whatever_its_number_of_chunks() -> None:
    small, large = report_summary_record(1, _report(2)), report_summary_record(1, _report(4096))
    assert len(json.dumps(large)) == pytest.approx(len(json.dumps(small)), abs=40)
    assert (large["chunks"], large["files"], large["bytes"], large["reads"]) == (
        4096, 3, 4096 * 4096, 2 * 4096
    )
    assert large["vcpu_bytes"] == [[0, 2048 * 4096], [1, 2048 * 4096]]


def test_chunk_rules_count_each_vms_decisions_and_explain_reads_them() -> None:
    decisions = [ChunkDecision("vm0", ChunkId(1, i), 0, True, "line 31", "") for i in range(5)]
    decisions.append(ChunkDecision("vm0", ChunkId(1, 9), 1, False, "line 4", ""))
    (record,) = chunk_rules_records(3, decisions)
    assert record["rules"] == {"line 31": 5, "line 4": 1}
    found = explain([record, {"tick": 3, "kind": "note", "vm": "vm0"}], "vm0")
    assert found.rules == {"line 31": 5, "line 4": 1}
