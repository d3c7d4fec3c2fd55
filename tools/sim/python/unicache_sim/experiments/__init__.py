"""The simulator's experiments: each runs a paper's workload on the simulated host and
measures it (the simulator's machinery, one level up, knows nothing of them).

One module per experiment, named by technique and what it measures, never by a policy
module's name (``unicache.policy.scu.mfc``, ``.srm``, ``.ncc``, ``.colors``, ``.replicas``):

* :mod:`.mfc_read` — the MFC read experiment (MFC paper §6.1-§6.3), three baselines in
  one run; :mod:`.mfc_baselines` how each baseline places threads and issues reads, and
  :mod:`.corunners` the other load on the machine (co-runners, MFC §4.6's background);
* :mod:`.parallel_bound` — upper bounds on MFC §6.3's parallel set-up (``bound``);
* :mod:`.srm_colors` — the SRM-buffer experiment (SRM paper §2, ``srm``);
* :mod:`.ncc_replicas` — the NCC parallel-grep experiment (dual-layered file cache §5,
  ``ncc``);
* :mod:`.sched_hop` — the scheduler hop between two CPUs, measured here or in a guest
  (``calibrate``);
* :mod:`.sim_speed` — the native core's speed against pycachesim (``bench``).

The ``unicache-sim`` commands, the grid and the plots (``unicache_sim.cli*``,
``unicache_sim.grid*``, ``plot``, ``figures``) run and show them.
"""
