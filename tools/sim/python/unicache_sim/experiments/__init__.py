"""The simulator's experiments: each runs a paper's workload on the simulated host and
measures it (the simulator's machinery, one level down, knows nothing of them).

One subpackage per paper, its modules named by what they measure; a subpackage is named
after the paper, not after a policy module (``unicache.policy.scu.mfc``, ``.srm``,
``.ncc``, ``.colors``, ``.replicas``):

* :mod:`.mfc` — :mod:`.mfc.read`, the MFC read experiment (MFC paper §6.1-§6.3), three
  baselines in one run; :mod:`.mfc.baselines` how each baseline places threads and issues
  reads, :mod:`.mfc.spec` its parameters, and :mod:`.mfc.corunners` the other load on the
  machine (co-runners, MFC §4.6's background); :mod:`.mfc.parallel_bound`, upper bounds on
  MFC §6.3's parallel set-up (``bound``); :mod:`.mfc.sched_hop`, the scheduler hop between
  two CPUs, measured here or in a guest (``calibrate``);
* :mod:`.srm` — :mod:`.srm.colors`, the SRM-buffer experiment (SRM paper §2, ``srm``),
  :mod:`.srm.memory` its pages, :mod:`.srm.cases` the §4 cases;
* :mod:`.ncc` — :mod:`.ncc.replicas`, the NCC parallel-grep experiment (dual-layered file
  cache §5, ``ncc``), and the iozone experiment (:mod:`.ncc.iozone`, its guest and summary);
* :mod:`.obs` — the observations paper's experiments (``obs``);
* :mod:`.dmc` — the DMC paper's microbenchmarks and SCU on DMC hardware (``dmc``);
* :mod:`.findings` — a quantity over seeds beside the paper's; :mod:`.sim_speed` — the
  native core's speed against pycachesim (``bench``).

The ``unicache-sim`` commands, the grid, the reproduction and the plots
(``unicache_sim.cli``, ``unicache_sim.grid``, ``unicache_sim.repro``) run and show them.
"""
