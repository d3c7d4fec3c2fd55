"""NCC: node-local replicas of guest page cache (the dual-layered file cache paper, §3.2).

* :mod:`~unicache.policy.ncc.cache` — the paper's algorithm over read events: which
  remotely read chunks get a replica on the reading node, its MQ queues
  (:mod:`~unicache.policy.ncc.kept`), counters, reclaim and coherence;
* :mod:`~unicache.policy.ncc.replicas` — its per-VM adapter: guest reports in as read
  events (:mod:`~unicache.policy.ncc.events`), one NCC instance per VM, replicas per guest
  node out (:func:`replicas_round`, the entry); what a replica costs a node's memory
  (:mod:`~unicache.policy.ncc.memory`) and whether it pays (:mod:`~unicache.policy.ncc.gain`).
"""

from unicache.policy.ncc.replicas import replicas_round

__all__ = ["replicas_round"]
