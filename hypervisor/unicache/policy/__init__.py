"""Pure policies: observations in, actions with reasons out (no I/O, no clock, no threads).

One package per technique, each written to be read beside its paper, and none importing
another: only the round composes them. Where a paper's algorithm runs on events a kernel
sees (every read, every buffer-cache miss) and a host sees only guest reports, the
algorithm and its per-VM adapter are two modules of its package: the paper's module can
be put beside its pseudo-code, the adapter turns reports into its events and its results
into actions. Each package's ``__init__`` names its paper and sections and exports its
entry.

* :mod:`~unicache.policy.scu` — SCU / MFC (the MFC paper): software cache unification,
  :class:`~unicache.policy.scu.ScuPolicy`;
* :mod:`~unicache.policy.obs` — OBS (the observations paper): vCPU placement by cache
  weight, :class:`~unicache.policy.obs.ObsPolicy`;
* :mod:`~unicache.policy.srm` — SRM-buffer (the SRM paper): page colors for streaming page
  caches, :func:`~unicache.policy.srm.colors_round`;
* :mod:`~unicache.policy.ncc` — NCC (the dual-layered file cache paper): node-local
  replicas, :func:`~unicache.policy.ncc.replicas_round`;
* :mod:`~unicache.policy.place` — a new VM's placement, :func:`~unicache.policy.place.place_vm`.

Around them: :mod:`~unicache.policy.machine`, the machine's cost figures two techniques
share (below them); :mod:`~unicache.policy.guestboot`, what a rebooted guest's VM forgets,
and :mod:`~unicache.policy.round`, one round in order (OBS pins, SRM colors and NCC
replicates, SCU publishes the tables), above them.
"""
