"""The shared named machines of the tests, as the Kubernetes CPU manager's ``topoDualSocketHT``.

Each is a shipped model (hypervisor/unicache/models/, sources in each TOML), loaded once.
A test that needs a machine takes one of these by name, so that what "opteron-16" means is
written in one place; tests of the model loader itself (tests/unit/test_topology.py) load
models directly.
"""

from __future__ import annotations

from unicache.topology import CacheLevel, CpuInfo, Inclusion, NumaNode, Scope, Topology
from unicache.topology.toml import load_model

#: MFC paper's machine: four quad-core Opteron chips, 2 MiB L3 each (Figure 1)
TOPO_OPTERON_16: Topology = load_model("opteron-16")
#: OBS paper's machine: one quad-core Xeon 5300, two LLC groups of two cores
TOPO_XEON_5300: Topology = load_model("xeon-5300-quad")
#: SRM-buffer paper's machine: a Xeon X5355 (two 4 MiB L2 groups of two cores)
TOPO_XEON_X5355: Topology = load_model("xeon-x5355")
#: NCC paper's machine: two single-core Opteron 242 nodes
TOPO_OPTERON_242_2NODE: Topology = load_model("opteron-242-2node")
#: one LLC group: nothing to unify
TOPO_CORE_I7_860: Topology = load_model("core-i7-860")
#: today's hosts: two-socket EPYC Genoa (CCX of 8 cores, 32 MiB L3)
TOPO_EPYC_2S: Topology = load_model("epyc-2s")
#: two-socket EPYC Rome: CCX of 4 cores, 16 MiB L3, two CCX per CCD, 16 CCX per socket
TOPO_EPYC_ROME_2S: Topology = load_model("epyc-rome-2s")
#: two-socket Sapphire Rapids, one mesh LLC per socket
TOPO_XEON_SPR_2S: Topology = load_model("xeon-spr-2s")
#: the same in SNC4: one node and LLC domain per tile
TOPO_XEON_SPR_2S_SNC4: Topology = load_model("xeon-spr-2s-snc4")

#: this project's machine (docs ENVIRONMENT.md, /work/shared/ENVIRONMENT.md): 2 cores of an
#: AMD EPYC sharing one 32 MiB L3, private 512 KiB L2, one NUMA node of 24 GiB. Written
#: out rather than discovered, so the tests give the same answer on every machine; the
#: sysfs discovery of the machine the tests run on is tests/unit/test_topology.py's
TOPO_HOST_2C: Topology = Topology(
    name="host-2c",
    source="docs: the development machine (2 cores, one L3, one node)",
    cpus=(CpuInfo(0, 0, 0, 0, 0), CpuInfo(1, 1, 0, 0, 0)),
    levels=(
        CacheLevel(1, 32 << 10, 8, 64, Scope.CORE, Inclusion.INCLUSIVE),
        CacheLevel(2, 512 << 10, 8, 64, Scope.CORE, Inclusion.INCLUSIVE),
        CacheLevel(3, 32 << 20, 16, 64, Scope.LLC_GROUP, Inclusion.VICTIM),
    ),
    nodes=(NumaNode(0, frozenset({0, 1}), 24 << 30, (10,)),),
)
