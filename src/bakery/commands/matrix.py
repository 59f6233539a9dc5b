"""The release matrix: bake (and verify) a series on many vLLM releases, in parallel
worker processes, and report for people (a grid, Markdown) and machines (JSON, JUnit)."""

from __future__ import annotations

import logging
import logging.handlers
import multiprocessing
import os
import re
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bakery.bake import treecopy
from bakery.context import Context
from bakery.errors import BakeryError, ReportedError, UsageError
from bakery.logs import muted
from bakery.model.results import VerifyState
from bakery.reports.matrix import Row, failed_tests


def select_versions(since: str, include_pre: bool = False) -> list[str]:
    from bakery.commands.releases import releases

    return releases(since, include_pre)


def asked_versions(vllm: list[str], since: str | None, include_pre: bool) -> list[str]:
    """The releases a matrix bakes: --vllm's (normalised: 0.32 and v0.32.0 are 0.32.0;
    latest is the newest release), then --since's that are not among them."""
    from bakery.sources import versions as v

    out: list[str] = []
    for spec in vllm:
        if spec == v.LATEST:
            from bakery.commands.releases import latest

            spec = latest()
        spec = v.normalize(spec)
        _check_spec(spec)
        if spec not in out:
            out.append(spec)
    if since:
        out += [x for x in select_versions(since, include_pre) if x not in out]
    return out


def _check_spec(spec: str) -> None:
    """A --vllm value that no bake could take is a bad argument (exit 2), said before any
    release is baked, not one failed row per value."""
    from bakery.errors import SourceError
    from bakery.sources import spec as sources

    try:
        sources.parse(spec)
        return
    except SourceError:
        pass
    hint = ""
    if re.fullmatch(r"v?\d+(\.\d+)*\s*[-:]\s*v?\d+(\.\d+)*", spec):
        first = re.split(r"\s*[-:]\s*", spec)[0]
        hint = f" (a range is --since {first}, or list the releases: --vllm A B C)"
    raise UsageError(f"--vllm {spec!r} is not a release, a local tree or git+URL@REF{hint}")


_busy: Any = None  # in a worker: the count of bakes in progress, shared by the workers


def _worker_init(busy: Any, log_queue: Any = None, level: int = logging.INFO) -> None:
    """A worker's start: tree copies share the cores with the bakes in progress; the
    steps of minutes its muted work still says (``loud``: a full test environment's
    build) go to the parent's handlers through log_queue, as they do with one job."""
    global _busy
    _busy = busy
    cores = os.cpu_count() or 1
    treecopy.set_jobs(lambda: max(cores // max(busy.value, 1), 1))
    if log_queue is not None:
        handler = logging.handlers.QueueHandler(log_queue)
        handler.addFilter(lambda record: getattr(record, "loud", False) is True)
        logger = logging.getLogger("bakery")
        logger.addHandler(handler)
        logger.setLevel(level)


def _bake_release_in_worker(
    series: str,
    version: str,
    out_root: str,
    verify: bool,
    interpret: bool,
    home: str,
    wheels: bool = False,
) -> Row:
    """Runs in a worker process (or, with one job, in this one): bake one release, verify
    it if asked; its progress is not narrated (the matrix reports rows)."""
    with muted():
        return _counted(series, version, out_root, verify, interpret, home, wheels)


def _counted(
    series: str,
    version: str,
    out_root: str,
    verify: bool,
    interpret: bool,
    home: str,
    wheels: bool,
) -> Row:
    if _busy is None:
        return _bake_release(series, version, out_root, verify, interpret, home, wheels)
    with _busy.get_lock():
        _busy.value += 1
    try:
        return _bake_release(series, version, out_root, verify, interpret, home, wheels)
    finally:
        with _busy.get_lock():
            _busy.value -= 1


def _bake_release(
    series: str,
    version: str,
    out_root: str,
    verify: bool,
    interpret: bool,
    home: str,
    wheels: bool = False,
) -> Row:
    os.environ["BAKERY_HOME"] = home
    from bakery.commands import apply as commands

    ctx = Context(Path(home))
    start = time.monotonic()
    out = Path(out_root) / f"{Path(series).name}-{version}"
    row = Row(version, "error")
    try:
        opts = commands.ApplyOptions(vllm=version, out=out, force=True, remember=False)
        report = commands.apply(ctx, series, opts)
        row.status, row.port, row.port_stale = report.status, report.port, report.port_stale
        row.diffs, row.baked_proof = report.diffs, report.proof
        if verify and report.status == "baked":
            _verify(ctx, row, series, out, interpret)
        if wheels and report.status == "baked":
            _wheels(ctx, row, out, Path(out_root) / "wheels")
    except ReportedError as e:
        row.error = e.message
        row.diffs = e.report.diffs
    except BakeryError as e:
        row.error = e.message
    row.seconds = time.monotonic() - start
    return row


def _verify(ctx: Context, row: Row, series: str, out: Path, interpret: bool) -> None:
    """Verify a baked tree into ``row``. A verify that cannot run (no GPU, no tests/
    folder, pytest stopped) is "error", never left unset: unset would read as ok."""
    from bakery.commands import verify as commands
    from bakery.verifying.plan import VerifyOptions

    log = out.with_name(out.name + ".verify.log")
    junit = out.with_name(out.name + ".verify.xml")
    try:
        options = VerifyOptions(interpret=interpret, junit=junit, pytest_args=("-q",), log=log)
        result, _ = commands.verify(ctx, series, tree=out, options=options)
    except BakeryError as e:
        row.verify, row.verify_error = "error", e.message
        return
    except OSError as e:
        row.verify, row.verify_error = "error", f"cannot run verify: {e}"
        return
    row.verify_log = str(log)
    row.verify = verify_state(result.exit_code, result.known_defects)
    if row.verify == "failed":
        row.failed_tests = failed_tests(junit)
    row.known_defects = dict(result.known_defects)


def verify_state(exit_code: int, known_defects: dict[str, int]) -> VerifyState:
    """A verify run as one state: a known defect is neither a pass nor a failure."""
    if exit_code != 0:
        return "failed"
    return "known-defects" if known_defects else "passed"


def exit_code(rows: list[Row], allow_fail: bool) -> int:
    """0 when every release is ok; 1 when one is not (0 with ``allow_fail``); 2 when a
    verify could not run, whatever ``allow_fail`` says: nothing was verified there."""
    if any(r.verify == "error" for r in rows):
        return 2
    return 0 if allow_fail or all(r.ok for r in rows) else 1


def _wheels(ctx: Context, row: Row, tree: Path, out_dir: Path) -> None:
    """matrix --wheels: the release's baked wheel for every platform, into out_dir, only
    from a verified bake (issue 45: nothing unverified is published): the row's verify,
    else a verdict recorded for the tree's content (``bakery verify``)."""
    from bakery.commands import proof as proofs
    from bakery.commands.wheel import platforms, wheels_from_tree
    from bakery.package.baked import read_baked
    from bakery.package.wheel import refuse_built

    try:
        refuse_built(read_baked(tree))  # what a wheel cannot carry is said first
        proof = row.proof if row.verify is not None else proofs.of_tree(ctx.cache.root, tree)
        if proof is None or not proof.verified:
            if row.verify is None:
                row.wheel_error = (
                    "not verified: matrix --wheels writes the wheels of verified bakes only "
                    "(add --verify)"
                )
            return  # a verify that failed or could not run is the row's failure already
        paths = wheels_from_tree(ctx, tree, platforms("all"), out_dir, proof)
    except BakeryError as e:
        row.wheel_error = e.message
        return
    row.wheels = [str(p) for p in paths]


@dataclass(frozen=True)
class MatrixOptions:
    """What ``bakery matrix`` is asked, beyond the series and the releases."""

    out_root: Path  #: each release's tree goes to <out_root>/SERIES-VERSION/
    jobs: int = 2
    verify: bool = False
    interpret: bool = True
    wheels: bool = False  #: each baked release's wheels go to <out_root>/wheels/


def run(ctx: Context, series: str, versions: list[str], opts: MatrixOptions) -> list[Row]:
    """Bake every version; the cache is shared safely between the workers (file locks)."""
    jobs = opts.jobs
    args = [
        (series, v, str(opts.out_root), opts.verify, opts.interpret, str(ctx.home), opts.wheels)
        for v in versions
    ]
    if jobs <= 1 or len(versions) == 1:
        results = [_bake_release_in_worker(*a) for a in args]
    else:
        # spawn, named: each worker starts from a clean interpreter with this process's
        # environment (Python 3.14's default, forkserver, would keep the environment of
        # its first use), and the initializer shares the count of bakes in progress
        context = multiprocessing.get_context("spawn")
        logger = logging.getLogger("bakery")
        queue = context.Queue() if logger.handlers else None  # none: a library caller
        listener = (
            logging.handlers.QueueListener(queue, *logger.handlers, respect_handler_level=True)
            if queue is not None
            else None
        )
        if listener is not None:
            listener.start()
        try:
            with ProcessPoolExecutor(
                max_workers=jobs,
                mp_context=context,
                initializer=_worker_init,
                initargs=(context.Value("i", 0), queue, logger.getEffectiveLevel()),
            ) as pool:
                results = list(pool.map(_bake_release_in_worker, *zip(*args, strict=True)))
        finally:
            if listener is not None:
                listener.stop()
    return results
