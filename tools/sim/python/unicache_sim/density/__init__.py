"""The density experiment (``unicache density``): VMs of a mix under their SLOs, simulated, live."""
