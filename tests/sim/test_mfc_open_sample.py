"""MFC's placement of small files a VM re-reads, with the shim's counts sampled per open or not.

One reader on opteron-16 opens each of its 32 files of 256 KiB (8 MiB, MFC's placing point)
every time it reads it (``MfcSpec.opens``). Counting every open, as the agent does by
default, SCU sees the VM's hot set and places it (2.4x over Linux, seeds 1-2, when this test
was written). Under the agent's opt-in open sample (one open in 8 of files up to 256 KiB,
``unicache-agent --open-sample 262144:3``), a report window, which holds a few opens of each
file, shows SCU well under half of the files: it predicts that the hot set fits one LLC
group and steps aside (0.99x and 1.00x). That is why the sample is not the agent's default
(docs/agent.md, "The open sample"); the test keeps the default on the side that places,
and the opt-in's cost where docs/agent.md says it is.
"""

from __future__ import annotations

import functools
from dataclasses import replace

import pytest
from unicache_sim.experiments.mfc import baselines
from unicache_sim.experiments.mfc.read import run_mfc
from unicache_sim.experiments.mfc.spec import MfcSpec
from unicache_sim.guest.opensample import AGENT_OPEN_SAMPLE, SMALL_FILES_SAMPLE, OpenSample
from unicache_sim.guest.shim import GuestShim

from tests.topologies import TOPO_OPTERON_16

#: a placing point, with a shorter measured phase than the grid's (as test_live_sampling)
SPEC = MfcSpec(opens=True, min_measure_bytes=48 * 1024 * 1024, measure_factor=2.0)
WS_MIB = 8.0


def _speedup(sample: OpenSample, seed: int, monkeypatch: pytest.MonkeyPatch) -> float:
    """unicache over Linux at the point, its guest's shim under ``sample``."""
    with monkeypatch.context() as patch:
        patch.setattr(baselines, "GuestShim", functools.partial(GuestShim, sample=sample))
        (point,) = run_mfc(TOPO_OPTERON_16, replace(SPEC, seed=seed), [WS_MIB])
    return point.speedup


@pytest.mark.parametrize("seed", [1, 2])
def test_the_agents_default_counts_let_scu_place_small_files_a_vm_re_reads(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _speedup(AGENT_OPEN_SAMPLE, seed, monkeypatch) > 1.8


@pytest.mark.parametrize("seed", [1, 2])
def test_sampling_the_opens_hides_the_hot_set_and_scu_steps_aside(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the limit docs/agent.md states for the opt-in: no gain, and no loss beyond 2 %
    assert 0.98 <= _speedup(SMALL_FILES_SAMPLE, seed, monkeypatch) < 1.2
