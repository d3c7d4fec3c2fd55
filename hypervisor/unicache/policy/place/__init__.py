"""Placement of a new VM: its NUMA nodes, LLC groups, vCPU pins, memory and guest topology
(the observations paper's "Policy: Migrating across caches" at a VM's arrival, with the
Kubernetes CPU manager's uncore-cache alignment).

* :mod:`~unicache.policy.place.vm` — one VM's placement (:func:`place_vm`, the entry);
* its values (:mod:`~unicache.policy.place.types`), options
  (:mod:`~unicache.policy.place.options`), the host's room and the profile
  (:mod:`~unicache.policy.place.room`) and fleets of arrivals
  (:mod:`~unicache.policy.place.fleet`).
"""

from unicache.policy.place.vm import place_vm

__all__ = ["place_vm"]
