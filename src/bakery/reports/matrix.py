"""The release matrix's rows (``Row``: one release's bake, verify and wheels) and their
forms: the JSON report (``to_json``, read back by ``rows_from_reports``), the Markdown
summary CI posts (``to_markdown``), JUnit XML (``to_junit``), and the failing tests named
from a verify's JUnit file (``failed_tests``). The matrix run itself is
:mod:`bakery.commands.matrix`.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
from packaging.version import Version

from bakery.bake.strict import needs_review
from bakery.errors import BakeryError
from bakery.model import records
from bakery.model.report import DiffResult, Proof, read_proof
from bakery.model.results import BakeStatus, Outcome, VerifyState
from bakery.safety import limits
from bakery.safety.text import clean, md_cell


@dataclass
class Row:
    version: str
    status: BakeStatus
    port: str | None = None
    error: str | None = None
    diffs: list[DiffResult] = field(default_factory=list)
    #: passed | known-defects (every test passed but those of registered defects) | failed |
    #: error (asked for, but could not run: no GPU, no tests, pytest crashed) | None (not
    #: asked for). Only "passed" and "known-defects" count as verified.
    verify: VerifyState | None = None
    verify_log: str | None = None
    seconds: float = 0.0
    #: why verify could not run (with verify == "error")
    verify_error: str | None = None
    wheels: list[str] = field(default_factory=list)  # matrix --wheels: the wheels written
    wheel_error: str | None = None
    #: the series' registered defects this bake has: id -> tests (verify "known-defects")
    known_defects: dict[str, int] = field(default_factory=dict)
    #: why the port is out of step with the series (patch.provenance.stale_lines)
    port_stale: list[str] = field(default_factory=list)
    #: the tests that failed or errored (pytest's node ids, from the verify's JUnit XML)
    failed_tests: list[str] = field(default_factory=list)
    #: what the bake's report says of the tree (issue 45: ``BakeReport.proof``); a verify
    #: of the row decides it (``proof``)
    baked_proof: Proof | None = None

    @property
    def proof(self) -> Proof | None:
        """The row's proof state: its verify's verdict where one ran, else the bake's."""
        if self.status not in ("baked", "checked"):
            return None
        if self.verified:
            return Proof("verified", f"verify {self.verify_cell}")
        if self.verify == "failed":
            return Proof("failed", "the series' tests failed on this bake")
        return self.baked_proof or Proof("unverified", "not yet tested")

    @property
    def verified(self) -> bool:
        return self.verify in ("passed", "known-defects")

    @property
    def ok(self) -> bool:
        # "checked": a `bakery check --json` report that applies
        return (
            self.status in ("baked", "checked")
            and (self.verify is None or self.verified)
            and not self.wheel_error
        )

    @property
    def verify_cell(self) -> str:
        """The verify outcome in words: "not verified: why" for a verify that did not run,
        the known defects by id for a bake that has them."""
        if self.verify == "error":
            return f"not verified: {self.verify_error or 'verify did not run'}"
        if self.verify == "known-defects":
            return "known defects: " + ", ".join(
                f"{d} ({n})" for d, n in sorted(self.known_defects.items())
            )
        return self.verify or "-"

    def to_json(self) -> dict[str, object]:
        return {
            "version": self.version,
            "status": self.status,
            "port": self.port,
            "port_stale": self.port_stale,
            "error": self.error,
            "verify": self.verify,
            "verify_error": self.verify_error,
            "verify_log": self.verify_log,
            "failed_tests": self.failed_tests,
            "known_defects": self.known_defects,
            "seconds": round(self.seconds, 2),
            "diffs": [d.to_json() for d in self.diffs],
            "wheels": self.wheels,
            "wheel_error": self.wheel_error,
            "proof": records.plain(self.proof),
        }


def summarize(diff: DiffResult) -> str:
    """One cell of the grid: the hunk outcomes of one diff, counted."""
    counts: dict[Outcome, int] = {}
    for f in diff.files:
        for h in f.hunks:
            counts[h.status] = counts.get(h.status, 0) + 1
    return ", ".join(f"{counts[s]} {s.value}" for s in _CELL_ORDER if s in counts) or "-"


#: The outcomes a grid cell counts, worst first (merged-syntax is not counted: as before).
_CELL_ORDER = (
    Outcome.FAILED,
    Outcome.ALREADY,
    Outcome.MERGED,
    Outcome.AMBIGUOUS,
    Outcome.FUZZ,
    Outcome.OFFSET,
    Outcome.APPLIED,
)


def failed_tests(junit: Path) -> list[str]:
    """The node ids (``tests/test_x.py::test_y[param]``) of the tests that failed or
    errored, from pytest's JUnit XML (the file verify wrote; empty where it is missing)."""
    import xml.etree.ElementTree as ET

    try:
        root = ET.parse(junit).getroot()
    except (OSError, ET.ParseError):
        return []
    found = []
    for case in root.iter("testcase"):
        if case.find("failure") is None and case.find("error") is None:
            continue
        found.append(_node_id(case.get("classname", ""), case.get("name", "")))
    return found


def _node_id(classname: str, name: str) -> str:
    """pytest's JUnit ``classname`` is the module's path in dots, then the class (``Test``
    by pytest's naming rule) if there is one: back to a node id."""
    parts = classname.split(".") if classname else []
    at = next((i for i, p in enumerate(parts) if p.startswith("Test")), len(parts))
    module, classes = parts[:at], parts[at:]
    head = "/".join(module) + ".py" if module else ""
    return "::".join([p for p in (head, *classes) if p] + [name])


def diff_names(rows: list[Row]) -> list[str]:
    names: list[str] = []
    for r in rows:
        for d in r.diffs:
            if d.name not in names:
                names.append(d.name)
    return names


def to_json(series: str, rows: list[Row]) -> dict[str, object]:
    return {
        "series": series,
        "ok": all(r.ok for r in rows),
        "releases": [r.to_json() for r in rows],
    }


def to_markdown(series: str, rows: list[Row], title: str = "bakery matrix") -> str:
    names = diff_names(rows)
    head = ["release", "status", "port", *names, "verify"]
    lines = [
        f"### {title}: {md_cell(series)}",
        "",
        "| " + " | ".join(md_cell(h) for h in head) + " |",
        "|" + "---|" * len(head),
    ]
    for r in rows:
        cells = {d.name: summarize(d) for d in r.diffs}
        # a merged, fuzzed or ambiguous hunk applied but asks for a look: never a plain ✅
        icon = ("⚠️" if needs_review(r.diffs) else "✅") if r.ok else "❌"
        lines.append(
            "| "
            + " | ".join(
                [
                    md_cell(r.version),
                    f"{icon} " + md_cell(r.status + (f": {r.error}" if r.error else "")),
                    md_cell(_port_cell(r)),
                    *[md_cell(cells.get(n, "-")) for n in names],
                    md_cell(r.verify_cell if r.verify else _proof_cell(r)),
                ]
            )
            + " |"
        )
    return "\n".join(lines) + "\n"


def _proof_cell(r: Row) -> str:
    """The verify column of a row no verify ran for: its proof state (issue 45), never a
    bare "-" that reads as nothing to worry about."""
    return r.proof.state if r.proof else "-"


def _port_cell(r: Row) -> str:
    if not r.port:
        return "-"
    return r.port + "".join(f" ⚠️ {line}" for line in r.port_stale)


#: A diff's outcomes that pass its JUnit case.
_PASSING = (Outcome.APPLIED, Outcome.OFFSET, Outcome.FUZZ, Outcome.MERGED, Outcome.AMBIGUOUS)


def to_junit(series: str, rows: list[Row]) -> bytes:
    # clean(): XML 1.0 cannot hold control characters or lone surrogates; ElementTree
    # escapes the rest
    suites = ET.Element("testsuites", name=clean(f"bakery matrix {series}"))
    for r in rows:
        cases = [(d.name, summarize(d), d.status in _PASSING) for d in r.diffs]
        if r.port:  # a port out of step with the series fails its own case
            cases.append(("port", "; ".join(r.port_stale) or r.port, not r.port_stale))
        if r.error:
            cases.append(("bake", r.error, False))
        if r.verify is not None:
            cases.append(("verify", r.verify_cell, r.verified))
        # a verify that did not run is a JUnit error, not a failed test
        errors = 1 if r.verify == "error" else 0
        suite = ET.SubElement(
            suites,
            "testsuite",
            name=clean(f"{series} vLLM {r.version}"),
            tests=str(len(cases) + len(r.known_defects)),
            failures=str(sum(1 for c in cases if not c[2]) - errors),
            errors=str(errors),
            skipped=str(len(r.known_defects)),
            time=f"{r.seconds:.2f}",
        )
        for name, text, ok in cases:
            case = ET.SubElement(
                suite, "testcase", classname=clean(f"{series}.{r.version}"), name=clean(name)
            )
            if not ok:
                kind = "error" if name == "verify" and errors else "failure"
                ET.SubElement(case, kind, message=clean(text)).text = clean(text)
        for defect, count in sorted(r.known_defects.items()):
            # Its own state: a skipped case that names the defect (not a pass, not a failure).
            case = ET.SubElement(
                suite,
                "testcase",
                classname=clean(f"{series}.{r.version}"),
                name=clean(f"known defect {defect}"),
            )
            ET.SubElement(case, "skipped", message=clean(f"known defect {defect}: {count} tests"))
    data: bytes = ET.tostring(suites, encoding="utf-8", xml_declaration=True)
    return data


def rows_from_reports(paths: list[Path]) -> tuple[str, list[Row]]:
    """Rows from `bakery apply --json` or `bakery matrix --json` reports (CI jobs). A
    report of the wrong shape is one line naming the file, never a traceback."""
    import json

    name = ""
    rows: list[Row] = []
    for p in paths:
        try:
            if p.stat().st_size > limits.MAX_REPORT:
                raise BakeryError(f"{p}: larger than {limits.MAX_REPORT} bytes")
            data = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError) as e:
            raise BakeryError(f"{p}: not a JSON report ({type(e).__name__})") from None
        try:
            found, more = _report_rows(data)
        except (KeyError, TypeError, AttributeError, ValueError) as e:
            # the builtin kind of the error, never its text (a report's hostile values)
            kind = next(c for c in type(e).__mro__ if c.__module__ == "builtins").__name__
            raise BakeryError(f"{p}: not a bakery report (bad {kind})") from None
        if found is None:
            raise BakeryError(f"{p}: not a bakery report")
        name = name or found
        rows += more
    rows = _once_each(rows)
    rows.sort(key=lambda r: Version(r.version) if _is_version(r.version) else Version("0"))
    return name, rows


def _once_each(rows: list[Row]) -> list[Row]:
    """One row per release, where several reports hold it (a check job's and a matrix's):
    a failed row before an ok one (a failure is never hidden), then a verified one before
    one that was not, then the later report's."""
    best: dict[str, Row] = {}
    for r in rows:
        had = best.get(r.version)
        if had is None or (not r.ok, r.verify is not None) >= (not had.ok, had.verify is not None):
            best[r.version] = r
    return list(best.values())


class _RowRecord(msgspec.Struct):
    """A row of a ``matrix --json`` report as read back (``Row.to_json``'s form)."""

    version: str
    status: BakeStatus
    port: str | None = None
    port_stale: list[str] | None = None
    error: str | None = None
    verify: VerifyState | None = None
    verify_error: str | None = None
    verify_log: str | None = None
    failed_tests: list[str] | None = None
    known_defects: dict[str, int] | None = None
    seconds: float = 0.0
    diffs: list[dict[str, Any]] = []
    wheels: list[str] | None = None
    wheel_error: str | None = None
    proof: Any = None


class _Releases(msgspec.Struct):
    """A ``matrix --json`` report."""

    series: str
    releases: list[_RowRecord]


class _Named(msgspec.Struct):
    name: str


class _Vllm(msgspec.Struct):
    version: str | None = None
    source: str | None = None


class _BakeRecord(msgspec.Struct):
    """An ``apply``/``check --json`` report: one release's row."""

    series: _Named
    vllm: _Vllm
    status: BakeStatus
    port: str | None = None
    port_stale: list[str] | None = None
    error: str | None = None
    verify: VerifyState | None = None
    diffs: list[dict[str, Any]] = []
    proof: Any = None


def read_row(data: object) -> Row:
    """A row of a ``matrix --json`` report (``Row.to_json``'s form), read back checked;
    :class:`~bakery.model.records.RecordError` for one of another shape."""
    return _row(records.load(data, _RowRecord))


def _row(r: _RowRecord) -> Row:
    return Row(
        version=r.version,
        status=r.status,
        port=r.port,
        error=r.error,
        diffs=[DiffResult.from_json(d) for d in r.diffs],
        verify=r.verify,
        verify_log=r.verify_log,
        failed_tests=r.failed_tests or [],
        seconds=r.seconds,
        verify_error=r.verify_error,
        wheels=r.wheels or [],
        wheel_error=r.wheel_error,
        known_defects=r.known_defects or {},
        port_stale=r.port_stale or [],
        baked_proof=read_proof(r.proof),
    )


def _report_rows(data: object) -> tuple[str | None, list[Row]]:
    if not isinstance(data, dict):
        return None, []
    if "releases" in data:
        report = records.load(data, _Releases)
        return report.series, [_row(r) for r in report.releases]
    if "series" in data and "vllm" in data:
        bake = records.load(data, _BakeRecord)
        row = Row(
            str(bake.vllm.version or bake.vllm.source),
            bake.status,
            bake.port,
            bake.error,
            [DiffResult.from_json(d) for d in bake.diffs],
            bake.verify,
            port_stale=bake.port_stale or [],
            baked_proof=read_proof(bake.proof),
        )
        return bake.series.name, [row]
    return None, []


def _is_version(v: str) -> bool:
    from bakery.sources.resolve import is_version

    return is_version(v)


def write_reports(
    series: str, rows: list[Row], *, markdown: Path | None, junit: Path | None
) -> None:
    """The Markdown summary and the JUnit file, where asked for."""
    from bakery.outputs import write

    if markdown:
        write(markdown, to_markdown(series, rows).encode(), "--markdown")
    if junit:
        write(junit, to_junit(series, rows), "--junit")
