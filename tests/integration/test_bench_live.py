"""``unicache bench live`` through ``make bench``'s recorder, at a tiny size: one real guest
(the project's image, QEMU), the real daemon, a short window and two reaction trials.

It checks what could fail, never a timing: the command exits 0 with its JSON schema, the
daemon exited 0 on SIGTERM and was sampled through the window, the channel carried the
guest's reports (bytes in from the guest), the agent was found in the guest, each trial
ran, the clock offset has a bound, the plot is a PNG, the table is in its block and no
QEMU of the run is left.
"""

from __future__ import annotations

from pathlib import Path

from tests.integration.benchtools import record_tiny


def test_bench_live_tiny_runs_one_guest_and_records_its_schema(tmp_path: Path) -> None:
    rec = record_tiny("live", tmp_path, "ucbench-")
    res = rec.result
    assert res["guests"] == 1 and res["daemon_exit"] == 0 and res["interval_s"] == 1.0
    assert res["daemon_command"].startswith("unicache run --interval 1 ")
    assert len(res["samples"]) >= 4 and res["daemon_rss_mib"] > 0
    assert res["window_s"] > 4.0
    assert res["channel_in_bps"] > 0, "no report reached the daemon in the window"
    assert len(res["agent_cpu_pct"]) == 1 and res["agent_cpu_pct"][0] >= 0
    assert len(res["trials"]) == 2 and res["reaction_missed"] <= 2
    for trial in res["trials"]:
        assert trial["guest"] == "ucbench-0" and int(trial["file"], 16) > 0
        if trial["reaction_ms"] is not None:
            assert trial["reaction_ms"] >= 0
    assert 0 < res["clock_bound_ms"] < 5000
    assert (tmp_path / "docs" / "figures" / "bench-live.png").read_bytes()[:4] == b"\x89PNG"
    assert "<!-- bench:live -->" in rec.page and "unicache bench live --plot" in rec.page
    print(f"bench live tiny: {rec.seconds:.0f} s")
