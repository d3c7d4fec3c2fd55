"""Hosts: the ports policies observe through and act on (replay, simulated, live)."""
