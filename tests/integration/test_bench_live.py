"""``unicache bench live`` through ``make bench``'s recorder, at a tiny size: one real guest
(the project's image, QEMU), the real daemon, a short window and two reaction trials.

It checks what could fail, never a timing: the command exits 0 with its JSON schema, the
daemon exited 0 on SIGTERM and was sampled through the window, the channel carried the
guest's reports (bytes in from the guest), the agent was found in the guest, each trial
ran, the clock offset has a bound, the plot is a PNG, the table is in its block and no
QEMU of the run is left.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

UNICACHE = str(Path(sys.executable).parent / "unicache")


def _qemus() -> set[int]:
    out = set()
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                argv = (proc / "cmdline").read_bytes()
            except OSError:
                continue
            if b"qemu-system" in argv and b"guest=ucbench-" in argv:
                out.add(int(proc.name))
    return out


def test_bench_live_tiny_runs_one_guest_and_records_its_schema(tmp_path: Path) -> None:
    before = _qemus()
    doc = tmp_path / "docs" / "PERFORMANCE.md"
    doc.parent.mkdir()
    doc.write_text("# Performance\n")
    t0 = time.monotonic()
    run = subprocess.run(
        [UNICACHE, "bench", "record", "--tiny", "--only", "live", "--out",
         str(tmp_path / "bench"), "--doc", str(doc)],
        capture_output=True, text=True, timeout=600)
    wall = time.monotonic() - t0
    assert not _qemus() - before, "QEMU of the bench left running"
    assert run.returncode == 0, run.stderr[-2000:]
    res = json.loads((tmp_path / "bench" / "live.json").read_text())
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
    page = doc.read_text()
    assert "<!-- bench:live -->" in page and "unicache bench live --plot" in page
    print(f"bench live tiny: {wall:.0f} s")
