"""The NCC experiments (dual-layered file cache paper §5): parallel greps and iozone."""
