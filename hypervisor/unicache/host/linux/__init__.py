"""The Linux-kernel adapters of the live host, one module per kernel interface.

* ``perf``: per-thread performance counters through perf_event_open(2) (the only ctypes
  user);
* ``cgroup``: vCPU thread CPU weight through cgroup v2 ``cpu.weight``, journaled;
* ``affinity``: vCPU thread affinity through sched_setaffinity(2), journaled
  (:class:`~unicache.host.linux.affinity.Actuator`).

libvirt domains are acted on through libvirt instead (:mod:`unicache.host.libvirt`).
"""
