"""The ``unicache-sim`` command: :mod:`.main` and one module per command."""
