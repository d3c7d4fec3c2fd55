"""Pure policies: observations in, actions with reasons out (no I/O, no clock, no threads).

One module per technique, each written to be read beside its paper. Where a paper's
algorithm runs on events a kernel sees (every read, every buffer-cache miss) and a host
sees only guest reports, the algorithm and its per-VM adapter are two modules: the
paper's module can be put beside its pseudo-code, the adapter turns reports into its
events and its results into actions.

SCU / MFC (MFC paper), software cache unification:

* :mod:`unicache.policy.mfc` — MFC's ``mfc_access`` (Figure 2, eq. 1-2), the paper's
  algorithm; :mod:`unicache.policy.mfcstate` its state and parameters (§4.2, §4.7);
* :mod:`unicache.policy.scu` — SCU for VMs, the adapter: MFC over guest reports, placement
  tables out; :mod:`unicache.policy.scutable` one VM's table;
  :mod:`unicache.policy.scuoptions` its options from the machine;
* :mod:`unicache.policy.cost` — SCU's cost model (§4.5); :mod:`unicache.policy.watch` its
  watch (placed reads must not get slower).

OBS (observations paper), vCPU placement by cache weight:

* :mod:`unicache.policy.obs` — OBS-X/L/C over cache units; :mod:`unicache.policy.obsoptions`
  its options and state, :mod:`unicache.policy.obsweight` the cache weight,
  :mod:`unicache.policy.obslocal` OBS-L, :mod:`unicache.policy.obscredit` OBS-C,
  :mod:`unicache.policy.obsaside` its step-asides: :mod:`unicache.policy.obsgain` (no two
  heavy vCPUs to keep apart) and :mod:`unicache.policy.obsqueue` (a pin's wait against
  its cache time), :mod:`unicache.policy.obsrebalance` OBS-X's periodic rebalance,
  :mod:`unicache.policy.obshome` a vCPU's home nodes (where its VM's memory is),
  :mod:`unicache.policy.cluster` sharing-aware OBS-X;
* :mod:`unicache.policy.place` — where a new VM goes (NUMA nodes, LLC groups, guest
  topology; OBS-X and the Kubernetes CPU manager's uncore-cache alignment), with its
  values (:mod:`~unicache.policy.placetypes`), options (:mod:`~unicache.policy.placeoptions`),
  the host's room and the profile (:mod:`~unicache.policy.placeroom`)
  and fleets of arrivals (:mod:`~unicache.policy.placefleet`).

SRM-buffer (SRM paper), page colors for streaming page caches:

* :mod:`unicache.policy.srm` — the paper's algorithm (§3.2, Figure 7): which LLC color
  each page-cache sequence gets, page by page;
* :mod:`unicache.policy.colors` — its per-VM adapter: guest reports in, the colored guest
  node of each run of a streaming file out; :mod:`unicache.policy.locality` which files
  a guest streams; :mod:`unicache.policy.colorgain` the step-aside (is coloring worth it).

NCC (dual-layered file cache paper), node-local replicas:

* :mod:`unicache.policy.ncc` — the paper's algorithm (§3.2) over read events: which
  remotely read chunks get a replica on the reading node, its MQ queues, reclaim and
  coherence;
* :mod:`unicache.policy.replicas` — its per-VM adapter: guest reports in as read events,
  one NCC instance per VM, replicas per guest node out.

All of them:

* :mod:`unicache.policy.round` — one round, in order: OBS pins, SRM colors and NCC
  replicates, SCU publishes the tables.
"""
