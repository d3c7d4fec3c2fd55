"""A Dask client for the simulator's sweeps: a local cluster of one-threaded worker
processes, or an existing scheduler, closed when the sweep ends.

Every sweep (the grid, the density experiment, ``figures``) sends independent, seeded tasks
to the client it gets here, so a result is the same on a local cluster or a remote one.
"""

from __future__ import annotations

import logging
import os
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from unicache.errors import ConfigError


def default_workers() -> int:
    """The CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


@contextmanager
def dask_client(workers: int, scheduler: str | None, what: str) -> Iterator[Any]:
    """A ``distributed.Client``: of a new local cluster, or of the scheduler at ``scheduler``.

    :param workers: worker processes of the local cluster (one thread each).
    :param scheduler: an existing scheduler's address; its workers must import
        ``unicache_sim`` (``None``: start a local cluster).
    :param what: the command, for the one-line errors.
    :raises ConfigError: if dask is missing or the scheduler cannot be reached.
    """
    try:
        from distributed import Client, LocalCluster
    except ImportError as err:
        raise ConfigError(f"{what} needs dask[distributed] (tools/sim/requirements.txt)") from err
    # the cluster's own chatter (INFO lines, a busy dashboard port) is not the user's
    logging.getLogger("distributed").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", message="Port .* is already in use", category=UserWarning)
    cluster = None
    # distributed's Client and LocalCluster carry no annotations
    if scheduler is not None:
        try:
            client = Client(scheduler, timeout="10s")  # type: ignore[no-untyped-call]
        except (OSError, TimeoutError) as err:
            raise ConfigError(f"cannot reach the Dask scheduler at {scheduler}") from err
    else:
        import dask

        # no statistical profiler on the workers: it keeps sampled frames, and a frame that
        # still holds a native engine would then drop it on the profiler's thread, which
        # PyO3 refuses ("unsendable") with a traceback on the user's terminal
        with dask.config.set({"distributed.worker.profile.enabled": False}):
            cluster = LocalCluster(  # type: ignore[no-untyped-call]
                n_workers=workers,
                threads_per_worker=1,
                processes=True,
                dashboard_address=None,
                silence_logs=logging.ERROR,
            )
        client = Client(cluster)  # type: ignore[no-untyped-call]
    try:
        yield client
    finally:
        client.close()  # type: ignore[no-untyped-call]
        if cluster is not None:
            cluster.close()
