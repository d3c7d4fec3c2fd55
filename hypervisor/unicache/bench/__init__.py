"""Benchmarks that are product code: they need nothing but the unicache package, so
``unicache bench`` runs them from the installed wheel or the host package (the policy
round: :mod:`unicache.bench.policy`). The benchmarks that build the guest shim or boot
guests run from a source checkout (``tools/bench/``)."""
