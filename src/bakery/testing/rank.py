"""A rank's side of the rank pools (:mod:`bakery.testing.dist` is the pool's): how a rank
process starts (``RankSpec``, ``rank_main``: join the world through the pool's store, warm
up, then run the tasks it is sent), the context a task gets (``RankContext``), and the
warm-up of its device and modules before it says it is ready."""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import pickle
import queue
import sys
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, cast

#: Seconds to spawn the ranks and join the process group.
START_TIMEOUT = 180.0


@dataclass
class RankContext:
    """Handed to every task as its first argument."""

    rank: int
    world_size: int
    device: Any  # torch.device
    backend: str
    #: the torch ProcessGroup of all ranks (a series' tests wrap it as their code expects)
    group: Any


def is_loopback(host: str) -> bool:
    import ipaddress

    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


#: A module a rank imports: its name and, for test modules that pytest imported by path
#: (not on sys.path), its file.
ModuleRef = tuple[str, str | None]


def import_module_at(modname: str, path: str | None) -> Any:
    module = sys.modules.get(modname)
    if module is not None:
        return module
    try:
        return importlib.import_module(modname)
    except ImportError:
        if path is None:
            raise
    # Test modules imported by pytest's importlib mode are not on sys.path.
    spec = importlib.util.spec_from_file_location(modname, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {modname} from {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[modname] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[modname]  # half-run: the next import runs it again, and raises
        raise
    return module


def resolve_ref(ref: tuple[str, str, str | None]) -> Callable[..., Any]:
    modname, qualname, path = ref
    obj: Any = import_module_at(modname, path)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return cast(Callable[..., Any], obj)


def warm_device(device: Any) -> None:
    """Make CUDA's context on ``device`` and Triton's driver (its compiled launcher
    utilities loaded from Triton's cache) now, not in the first test that needs them:
    about a second of each process's first GPU task on the device (BENCHMARKS.md,
    2026-12-06). A CPU device needs neither. A failure here is left to the test that
    needs the GPU, which raises it with its own traceback."""
    if getattr(device, "type", None) != "cuda":
        return
    with contextlib.suppress(Exception):
        import torch

        torch.zeros(1, device=device)
        import triton

        triton.runtime.driver.active.get_current_device()


def warm_rank(device: Any, modules: Sequence[ModuleRef]) -> None:
    """What a rank's first task would pay, paid before the rank says it is ready (its
    pool starts while single-rank tests run): the device (:func:`warm_device`) and the
    modules whose tests send it tasks. An import that fails is left for the task that
    needs the module: it raises there, with its traceback, as before (BaseException
    too: pytest's module-level skip is one)."""
    warm_device(device)
    for modname, path in modules:
        with contextlib.suppress(BaseException):
            import_module_at(modname, path)


@dataclass(frozen=True)
class RankSpec:
    """One rank of a world, as its process starts: where the world's store is
    (``store_at``: host, port), its backend and device, how long a collective may take,
    the modules it warms up with, and where NCCL writes its debug log (None: no log)."""

    rank: int
    world_size: int
    store_at: tuple[str, int]
    backend: str
    device: str
    collective_timeout: float
    modules: tuple[ModuleRef, ...] = ()
    nccl_log: str | None = None


def rank_main(spec: RankSpec, inbox: Any, outbox: Any) -> None:
    """Entry point of a spawned rank: join the group through the pool's store, warm up
    (:func:`warm_rank`), then run tasks until told to stop. With a loopback store, gloo's
    pair sockets are on ``lo`` too (gloo follows the host name's address otherwise)."""
    rank, world_size, device, backend = spec.rank, spec.world_size, spec.device, spec.backend
    try:
        host, port = spec.store_at
        if is_loopback(host):
            os.environ["GLOO_SOCKET_IFNAME"] = "lo"
        nccl_log = spec.nccl_log
        if nccl_log is not None:  # the transport NCCL chose (bakery.testing.transport)
            os.environ["NCCL_DEBUG"] = "INFO"
            os.environ["NCCL_DEBUG_SUBSYS"] = "INIT,NET"
            os.environ["NCCL_DEBUG_FILE"] = os.path.join(nccl_log, "nccl.%h.%p.log")
        import torch
        import torch.distributed as dist

        dev = torch.device(device)
        if dev.type == "cuda":
            torch.cuda.set_device(dev)
        store = dist.TCPStore(  # type: ignore[attr-defined]
            host, port, None, False, timedelta(seconds=START_TIMEOUT), use_libuv=True
        )
        dist.init_process_group(
            backend,
            store=store,
            rank=rank,
            world_size=world_size,
            timeout=timedelta(seconds=spec.collective_timeout),
            device_id=dev if backend == "nccl" else None,
        )
        group = dist.new_group(list(range(world_size)), backend=backend)
        ctx = RankContext(rank, world_size, dev, backend, group)
        warm_rank(dev, spec.modules)
    except BaseException:
        outbox.put(("ready", rank, False, traceback.format_exc()))
        return
    outbox.put(("ready", rank, True, None))
    parent = os.getppid()
    try:
        while True:
            try:
                message = inbox.get(timeout=1.0)
            except queue.Empty:
                if os.getppid() != parent:
                    break  # its fork server (or owner) is gone: nobody will ask again
                continue
            if message is None:
                break
            task_id, ref, payload = message
            try:
                result = resolve_ref(ref)(ctx, *pickle.loads(payload))
                outbox.put((task_id, rank, True, pickle.dumps(result)))
            except BaseException:
                outbox.put((task_id, rank, False, traceback.format_exc()))
    finally:
        with contextlib.suppress(Exception):
            dist.destroy_process_group()
