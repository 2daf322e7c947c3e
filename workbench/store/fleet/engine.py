"""The one seam for per-file and per-run work: in process, on local processes, or on Dask.

Every engine maps a picklable function over items and yields the results in item order, with at
most `workers + 1` items in flight (or as many as the caller says), so the caller holds a bounded
number of results however many items there are. Results are identical on every engine: the function is the same, only where it
runs changes. A Dask scheduler address (`tcp://HOST:PORT`, or WORKBENCH_SCHEDULER) selects Dask
distributed; its workers must see the same store (a shared disk, or the same bucket).
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing import get_context
from typing import Any, Protocol, TypeVar

from workbench.errors import WorkbenchError

T = TypeVar("T")
R = TypeVar("R")

SCHEDULER_ENV = "WORKBENCH_SCHEDULER"
# What local workers run: the fleet decode, with the importers it asks for. Named, not
# imported: only the fork server imports them.
WORKER_MODULES = (
    "workbench.store.fleet.fleet_ingest",
    "workbench.store.importers.kineto.kineto_json",
    "workbench.store.importers.nsys.nsys_sqlite",
)


class _Pending(Protocol):
    def result(self) -> Any: ...


@dataclass
class Engine:
    """Where mapped work runs: `kind` is serial / local / dask; `workers` bounds what is in flight."""

    kind: str
    workers: int
    _submit: Callable[[Callable[[Any], Any], Any], _Pending] | None = None

    def map(
        self, fn: Callable[[T], R], items: Iterable[T], ahead: int | None = None
    ) -> Iterator[R]:
        """fn over items, results in item order, at most `ahead` (default workers + 1) in flight."""
        if self._submit is None:
            for item in items:
                yield fn(item)
            return
        limit = max(ahead if ahead is not None else self.workers + 1, 1)
        pending: deque[_Pending] = deque()
        for item in items:
            pending.append(self._submit(fn, item))
            if len(pending) >= limit:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()


def scheduler_address(given: str | None) -> str | None:
    """The Dask scheduler to use: the option, else WORKBENCH_SCHEDULER, else none."""
    address = given if given is not None else os.environ.get(SCHEDULER_ENV) or None
    if address is not None and "://" not in address:
        raise WorkbenchError(f"--scheduler {address!r}", "expected an address like tcp://HOST:PORT")
    return address


@contextmanager
def open_engine(
    workers: int | None = None, scheduler: str | None = None, client: Any = None
) -> Iterator[Engine]:
    """An engine: a Dask `client` or scheduler address wins; else `workers` local processes
    (1 = in this process). The pool or connection is closed on exit."""
    address = scheduler_address(scheduler) if client is None else None
    if client is not None or address is not None:
        with _dask(client, address) as engine:
            yield engine
        return
    n = workers if workers is not None else 1
    if n < 1:
        raise WorkbenchError(f"--workers {n}", "needs at least 1 worker")
    if n == 1:
        yield Engine("serial", 1)
        return
    # Not fork: this process may hold pyarrow / duckdb thread pools a fork would copy. A fork
    # server is a fresh single-threaded interpreter that imports the workers' modules once;
    # each worker is forked from it, instead of spawning and importing (~1 s CPU each, more
    # when bytecode is not cached) as many times as there are workers.
    ctx = get_context("forkserver")
    ctx.set_forkserver_preload(list(WORKER_MODULES))
    with ProcessPoolExecutor(max_workers=n, mp_context=ctx) as pool:

        def submit(fn: Callable[[Any], Any], item: Any) -> Future[Any]:
            return pool.submit(fn, item)

        yield Engine("local", n, submit)


@contextmanager
def _dask(client: Any, address: str | None) -> Iterator[Engine]:
    from distributed import Client

    own = client is None
    if own:
        try:
            client = Client(address, timeout="10s", set_as_default=False)  # type: ignore[no-untyped-call]
        except (OSError, TimeoutError) as exc:
            raise WorkbenchError(f"--scheduler {address}", f"cannot reach it: {exc}") from exc
    try:
        n = max(1, len(client.scheduler_info(n_workers=-1)["workers"]))

        def submit(fn: Callable[[Any], Any], item: Any) -> Any:
            # pure=False: two items with equal content are still two pieces of work.
            return client.submit(fn, item, pure=False)

        yield Engine("dask", n, submit)
    finally:
        if own:
            client.close()
