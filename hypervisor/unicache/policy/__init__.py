"""Pure policies: observations in, actions with reasons out (no I/O, no clock, no threads).

One module per technique, each written to be read beside its paper:

* :mod:`unicache.policy.mfc` — MFC's ``mfc_access`` (MFC paper Figure 2, eq. 1-2);
* :mod:`unicache.policy.scu` — SCU for VMs: placement tables from guest reports;
* :mod:`unicache.policy.obs` — OBS-X/L/C vCPU placement from cache weights;
* :mod:`unicache.policy.srm` — SRM-buffer page colors for guest page-cache sequences;
* :mod:`unicache.policy.ncc` — NCC node-local replicas of remotely read chunks;
* :mod:`unicache.policy.place` — where a new VM goes (NUMA nodes, LLC groups, guest
  topology; OBS-X and the Kubernetes CPU manager's uncore-cache alignment), with its
  values (:mod:`~unicache.policy.placetypes`), options (:mod:`~unicache.policy.placeoptions`)
  and fleets of arrivals (:mod:`~unicache.policy.placefleet`);
* :mod:`unicache.policy.round` — one round of all of them, in order.
"""
