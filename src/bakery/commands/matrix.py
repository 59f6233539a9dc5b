"""The release matrix: bake (and verify) a series on many vLLM releases, in parallel
worker processes, and report for people (a grid, Markdown) and machines (JSON, JUnit)."""

from __future__ import annotations

import os
import time
import xml.etree.ElementTree as ET
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.version import Version

from bakery.bake import treecopy
from bakery.errors import BakeryError


@dataclass
class Row:
    version: str
    status: str  # baked | conflict | error
    port: str | None = None
    error: str | None = None
    diffs: list[dict[str, object]] = field(default_factory=list)
    verify: str | None = None  # passed | known-defects | failed | None (not run)
    verify_log: str | None = None
    seconds: float = 0.0
    #: the series' registered defects this bake has: id -> tests (verify "known-defects")
    known_defects: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status == "baked" and self.verify in (None, "passed", "known-defects")

    def to_json(self) -> dict[str, object]:
        return {
            "version": self.version,
            "status": self.status,
            "port": self.port,
            "error": self.error,
            "verify": self.verify,
            "verify_log": self.verify_log,
            "known_defects": self.known_defects,
            "seconds": round(self.seconds, 2),
            "diffs": self.diffs,
        }


def select_versions(since: str, include_pre: bool = False) -> list[str]:
    from bakery.sources.resolve import release_versions

    floor = Version(since)
    return [str(v) for v in release_versions(include_pre) if v >= floor]


def summarize(diff: dict[str, object]) -> str:
    """One cell of the grid: the hunk outcomes of one diff, counted."""
    counts: dict[str, int] = {}
    for f in diff.get("files", []):  # type: ignore[attr-defined]
        for h in f["hunks"]:
            counts[h["status"]] = counts.get(h["status"], 0) + 1
    order = ["failed", "already-applied", "merged", "fuzz", "offset", "applied"]
    return ", ".join(f"{counts[s]} {s}" for s in order if s in counts) or "-"


_busy: Any = None  # in a worker: the count of bakes in progress, shared by the workers


def _worker_init(busy: Any) -> None:
    global _busy
    _busy = busy
    cores = os.cpu_count() or 1
    treecopy.set_jobs(lambda: max(cores // max(busy.value, 1), 1))


def _one(
    series: str, version: str, out_root: str, verify: bool, interpret: bool, home: str
) -> dict[str, Any]:
    """Runs in a worker process: bake one release, verify it if asked."""
    if _busy is None:
        return _one_bake(series, version, out_root, verify, interpret, home)
    with _busy.get_lock():
        _busy.value += 1
    try:
        return _one_bake(series, version, out_root, verify, interpret, home)
    finally:
        with _busy.get_lock():
            _busy.value -= 1


def _one_bake(
    series: str, version: str, out_root: str, verify: bool, interpret: bool, home: str
) -> dict[str, Any]:
    os.environ["BAKERY_HOME"] = home
    from bakery.commands import bake as commands

    start = time.monotonic()
    out = Path(out_root) / f"{Path(series).name}-{version}"
    row = Row(version, "error")
    try:
        report = commands.apply(series, vllm=version, out=out, force=True)
        row.status, row.port = report.status, report.port
        row.diffs = [d.to_json() for d in report.diffs]
        if verify and report.status == "baked":
            log = out.with_name(out.name + ".verify.log")
            result, _ = commands.verify(
                series, tree=out, interpret=interpret, junit=None, pytest_args=["-q"], log=log
            )
            row.verify_log = str(log)
            row.verify = verify_state(result.exit_code, result.known_defects)
            row.known_defects = dict(result.known_defects)
    except commands.ReportedError as e:
        row.error = e.message
        row.diffs = [d.to_json() for d in e.report.diffs]
    except BakeryError as e:
        row.error = e.message
    row.seconds = time.monotonic() - start
    return row.to_json()


def verify_state(exit_code: int, known_defects: dict[str, int]) -> str:
    """A verify run as one state: a known defect is neither a pass nor a failure."""
    if exit_code != 0:
        return "failed"
    return "known-defects" if known_defects else "passed"


def verify_cell(row: Row) -> str:
    """The verify column of the grid and the Markdown."""
    if row.verify == "known-defects":
        return "known defects: " + ", ".join(
            f"{d} ({n})" for d, n in sorted(row.known_defects.items())
        )
    return row.verify or "-"


def run(
    series: str,
    versions: list[str],
    *,
    out_root: Path,
    jobs: int,
    verify: bool,
    interpret: bool,
    home: Path,
) -> list[Row]:
    """Bake every version; the cache is shared safely between the workers (file locks)."""
    # Download/extract each release once, before the workers race for it.
    args = [(series, v, str(out_root), verify, interpret, str(home)) for v in versions]
    if jobs <= 1 or len(versions) == 1:
        results = [_one(*a) for a in args]
    else:
        # imported before the workers fork, so that each does not import them again
        from bakery.bake import merge  # noqa: F401

        with ProcessPoolExecutor(max_workers=jobs) as pool:
            results = list(pool.map(_one, *zip(*args, strict=True)))
    rows = []
    for r in results:
        row = Row(
            str(r["version"]),
            str(r["status"]),
            r["port"],
            r["error"],
            r["diffs"],
            r["verify"],
            r["verify_log"],
            float(r["seconds"]),
            dict(r.get("known_defects") or {}),
        )
        rows.append(row)
    return rows


def diff_names(rows: list[Row]) -> list[str]:
    names: list[str] = []
    for r in rows:
        for d in r.diffs:
            if d["name"] not in names:
                names.append(str(d["name"]))
    return names


def to_json(series: str, rows: list[Row]) -> dict[str, object]:
    return {
        "series": series,
        "ok": all(r.ok for r in rows),
        "releases": [r.to_json() for r in rows],
    }


def to_markdown(series: str, rows: list[Row]) -> str:
    names = diff_names(rows)
    head = ["release", "status", "port", *names, "verify"]
    lines = [
        f"### bakery matrix: {series}",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    for r in rows:
        cells = {str(d["name"]): summarize(d) for d in r.diffs}
        icon = "✅" if r.ok else "❌"
        lines.append(
            "| "
            + " | ".join(
                [
                    r.version,
                    f"{icon} {r.status}" + (f": {r.error}" if r.error else ""),
                    r.port or "-",
                    *[cells.get(n, "-") for n in names],
                    verify_cell(r),
                ]
            )
            + " |"
        )
    return "\n".join(lines) + "\n"


def to_junit(series: str, rows: list[Row]) -> bytes:
    suites = ET.Element("testsuites", name=f"bakery matrix {series}")
    for r in rows:
        cases = [
            (
                str(d["name"]),
                summarize(d),
                d.get("status") in ("applied", "offset", "fuzz", "merged"),
            )
            for d in r.diffs
        ]
        if r.error:
            cases.append(("bake", r.error, False))
        if r.verify is not None:
            cases.append(("verify", r.verify, r.verify != "failed"))
        suite = ET.SubElement(
            suites,
            "testsuite",
            name=f"{series} vLLM {r.version}",
            tests=str(len(cases) + len(r.known_defects)),
            failures=str(sum(1 for c in cases if not c[2])),
            skipped=str(len(r.known_defects)),
            time=f"{r.seconds:.2f}",
        )
        for name, text, ok in cases:
            case = ET.SubElement(suite, "testcase", classname=f"{series}.{r.version}", name=name)
            if not ok:
                ET.SubElement(case, "failure", message=text).text = text
        for defect, count in sorted(r.known_defects.items()):
            # Its own state: a skipped case that names the defect (not a pass, not a failure).
            case = ET.SubElement(
                suite, "testcase", classname=f"{series}.{r.version}", name=f"known defect {defect}"
            )
            ET.SubElement(case, "skipped", message=f"known defect {defect}: {count} tests")
    return ET.tostring(suites, encoding="utf-8", xml_declaration=True)


def rows_from_reports(paths: list[Path]) -> tuple[str, list[Row]]:
    """Rows from `bakery apply --json` or `bakery matrix --json` reports (CI jobs)."""
    import json

    name = ""
    rows: list[Row] = []
    for p in paths:
        try:
            data = json.loads(p.read_text())
        except (OSError, ValueError) as e:
            raise BakeryError(f"{p}: not a JSON report ({e})") from None
        if "releases" in data:
            name = name or str(data.get("series"))
            for r in data["releases"]:
                rows.append(
                    Row(
                        r["version"],
                        r["status"],
                        r.get("port"),
                        r.get("error"),
                        r.get("diffs", []),
                        r.get("verify"),
                        r.get("verify_log"),
                        r.get("seconds", 0.0),
                        dict(r.get("known_defects") or {}),
                    )
                )
        elif "series" in data and "vllm" in data:
            name = name or str(data["series"]["name"])
            verify = data.get("verify")
            rows.append(
                Row(
                    str(data["vllm"].get("version") or data["vllm"].get("source")),
                    data["status"],
                    data.get("port"),
                    data.get("error"),
                    data.get("diffs", []),
                    verify,
                )
            )
        else:
            raise BakeryError(f"{p}: not a bakery report")
    rows.sort(key=lambda r: Version(r.version) if _is_version(r.version) else Version("0"))
    return name, rows


def _is_version(v: str) -> bool:
    from bakery.sources.resolve import is_version

    return is_version(v)
