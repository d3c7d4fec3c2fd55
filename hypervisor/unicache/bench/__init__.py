"""unicache's benchmarks, product code: ``unicache bench`` runs each from the installed
wheel or the host package as well as from a checkout. The policy round's
(:mod:`.policy`) needs nothing but this package; the shim's (:mod:`.shim`) a built or
installed shim; the live daemon's (:mod:`.live_bench`, run by :mod:`.live_run`) and
ordinary programs' in a guest (:mod:`.guest_programs`, run by :mod:`.guest_programs_run`)
a guest image, and the live one the simulator's package;
``make bench`` records them all (:mod:`.record`), and the simulator's calibration of the
shim's cost from the shim's run (:mod:`.shim_calibration`, which imports the simulator).
The guest's halves of the two that boot guests (``live_guest.py``,
``guest_programs_runner.py``) are read as text and run by the guest's python3; nothing on
the host imports them."""
