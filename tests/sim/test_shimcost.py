"""What the shim costs a file read whole (``ShimCost.open_cycles``) and the calibration's
file figures: parsed, validated, interpolated, and never charging a file's read twice."""

from __future__ import annotations

import pytest
from unicache.errors import ConfigError
from unicache_sim.guest import shimcost
from unicache_sim.guest.shimcost import ShimCost

SIZES = (512, 4096, 16384, 65536, 262144)
FILE_SIZES = (4096, 16384, 65536)
BASE = """source = "test"
clock_ghz = 2.0
sizes = [512, 4096, 16384, 65536, 262144]
none_ns = [1, 2, 3, 4, 5]
unplaced_ns = [10, 20, 30, 40, 50]
placed_ns = [100, 200, 300, 400, 500]
"""
FILES = """file_sizes = [4096, 16384, 65536]
file_counted_ns = [560, 600, 640]
file_skipped_ns = [90, 95, 100]
"""


def _cost() -> ShimCost:
    return shimcost.parse(BASE + FILES)


def test_the_file_figures_are_parsed() -> None:
    cost = _cost()
    assert cost.file_sizes == FILE_SIZES
    assert cost.file_counted_ns == (560.0, 600.0, 640.0)
    assert cost.file_skipped_ns == (90.0, 95.0, 100.0)


def test_a_counted_file_is_charged_its_figure_less_its_one_read_call() -> None:
    cost = _cost()
    # 16 KiB: 600 ns the file, 30 ns the call read_chunk charges on an unplaced table
    assert cost.open_cycles(True, 16384) == pytest.approx((600 - 30) * 2.0)
    # log2-interpolated between 4 and 16 KiB (and the call's figure too)
    assert cost.open_cycles(True, 8192) == pytest.approx((580 - 25) * 2.0)
    # held at the ends: a 1 MiB file costs the 64 KiB file's figure less a 1 MiB call
    assert cost.open_cycles(True, 1 << 20) == pytest.approx((640 - 50) * 2.0)
    assert cost.open_cycles(True, 100) == pytest.approx((560 - 10) * 2.0)


def test_a_counted_file_is_never_charged_below_zero() -> None:
    cheap = shimcost.parse(BASE + FILES.replace("[560, 600, 640]", "[5, 6, 7]"))
    assert cheap.open_cycles(True, 16384) == 0.0


def test_a_skipped_file_is_charged_its_skipped_figure() -> None:
    cost = _cost()
    assert cost.open_cycles(False, 65536) == pytest.approx(100 * 2.0)
    assert cost.open_cycles(False, 1 << 30) == pytest.approx(100 * 2.0)


def test_a_cost_without_file_figures_charges_opens_nothing() -> None:
    free = ShimCost("free", 2.6, SIZES, {s: (0.0,) * 5 for s in shimcost.TABLE_STATES})
    assert free.open_cycles(True, 16384) == 0.0 and free.open_cycles(False, 16384) == 0.0


@pytest.mark.parametrize(
    ("files", "field"),
    [
        ("", "file_sizes is missing"),
        (FILES.replace("[4096, 16384, 65536]", "[16384, 4096]"), "file_sizes must"),
        (FILES.replace("[4096, 16384, 65536]", "[]"), "file_sizes must"),
        (FILES.replace("[560, 600, 640]", "[560, 600]"), "file_counted_ns needs one"),
        (FILES.replace("[90, 95, 100]", '["x", 95, 100]'), "file_skipped_ns:"),
        (FILES.replace("file_skipped_ns", "skipped_ns"), "file_skipped_ns is missing"),
    ],
)
def test_a_broken_file_figure_is_one_error_naming_its_field(files: str, field: str) -> None:
    with pytest.raises(ConfigError, match=f"shimcost.toml: {field}"):
        shimcost.parse(BASE + files)


def test_the_shipped_calibration_has_file_figures() -> None:
    cost = shimcost.SHIM_COST
    assert cost.file_sizes and cost.open_cycles(True, 16384) > cost.open_cycles(False, 16384)
