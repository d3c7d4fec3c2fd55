"""The simulated host and guest: Host port, VMs, CFS, and the guest's shim, agent and timing."""
