"""Benchmarks of unicache's own components (``unicache bench ...``)."""
