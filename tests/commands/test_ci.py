"""``bakery ci``: the steps of the reusable workflows, run end to end as the workflow runs them.

A team's second series is made as a new user makes it (``bakery init``, an edit of the
working tree, ``bakery refresh --new-diff``, its own test), on three tiny releases served by
the local index (1.0.0 the base, 1.1.0 that takes the series, 1.2.0 that does not). Then
the ``run:`` steps of ``.github/workflows/bakery-rebake.yml`` itself are read from the file
and run with bash, job by job, with the environment GitHub would give them (``env:``
resolved, ``GITHUB_OUTPUT``, ``GITHUB_STEP_SUMMARY``) and a stand-in ``gh`` that keeps
issues in a file: the plan's matrix comes from the series' base, each release's reports
land, the summary joins them, and the red release has one issue, edited on the next red
run, never opened twice. ``uses:`` steps (checkout, caches, artifacts) are GitHub's and
are not run here.
"""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
import textwrap
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result

from tests.support.archives import sdist
from tests.support.index import Index

yaml = pytest.importorskip("yaml", reason="PyYAML comes with the dev extra (pre-commit)")

ROOT = Path(__file__).resolve().parents[2]
REBAKE = ROOT / ".github" / "workflows" / "bakery-rebake.yml"
PORT = ROOT / ".github" / "workflows" / "bakery-port.yml"
Cli = Callable[..., Result]

Y_PY = "".join(f"line {i}\n" for i in range(1, 13))
SERIES_TEST = '''\
"""myteam's own test: the line its diff changed, in the baked tree."""

from pathlib import Path


def test_the_change_is_baked(baked_tree: Path) -> None:
    assert "line 5 (myteam)" in (baked_tree / "vllm" / "y.py").read_text()
'''

GH = '''\
#!{python}
"""A stand-in for GitHub's CLI: issues kept in a JSON file, every call logged."""
import json, sys
from pathlib import Path

state = Path({state!r})
issues = json.loads(state.read_text()) if state.exists() else []
args = sys.argv[1:]
with open({log!r}, "a") as log:
    log.write(json.dumps(args) + "\\n")

def opt(name):
    return args[args.index(name) + 1]

if args[:2] == ["issue", "list"]:
    print(json.dumps([{{"number": i["number"], "title": i["title"]}}
                      for i in issues if i["state"] == "open"]))
elif args[:2] == ["issue", "create"]:
    n = len(issues) + 1
    issues.append({{"number": n, "title": opt("--title"), "state": "open",
                   "body": Path(opt("--body-file")).read_text()}})
    print(f"https://github.com/team/repo/issues/{{n}}")
elif args[:2] == ["issue", "edit"]:
    issues[int(args[2]) - 1]["body"] = Path(opt("--body-file")).read_text()
elif args[:2] == ["issue", "close"]:
    issues[int(args[2]) - 1]["state"] = "closed"
else:
    sys.exit(f"gh stand-in: {{args}}")
state.write_text(json.dumps(issues))
'''


# --- a tiny GitHub Actions runner for run: steps ----------------------------------------------

EXPR = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")


def _lookup(path: str, ctx: Mapping[str, Any]) -> Any:
    value: Any = ctx
    for part in path.split("."):
        value = value.get(part, "") if isinstance(value, Mapping) else ""
    return value


def resolve(text: object, ctx: Mapping[str, Any]) -> str:
    """``${{ a.b }}`` and ``${{ a.b || 'x' }}``: the expressions bakery's workflows give env."""

    def one(m: re.Match[str]) -> str:
        for alt in m.group(1).split("||"):
            alt = alt.strip()
            value = alt[1:-1] if alt.startswith("'") else _lookup(alt, ctx)
            if value not in ("", None):
                return str(value)
        return ""

    return EXPR.sub(one, str(text))


def run_job(
    workflow: dict[str, Any], job: str, ctx: dict[str, Any], cwd: Path, tmp: Path
) -> dict[str, tuple[int, str]]:
    """Every ``run:`` step of ``job`` but bakery's installation, in order, as GitHub would
    after a failure (each later step asks ``!cancelled()``): name -> (exit code, output)."""
    steps_ctx: dict[str, Any] = {}
    ctx = {**ctx, "steps": steps_ctx}
    env_base = {
        **os.environ,
        **{k: resolve(v, ctx) for k, v in (workflow.get("env") or {}).items()},
    }
    spec = workflow["jobs"][job]
    env_base.update({k: resolve(v, ctx) for k, v in (spec.get("env") or {}).items()})
    done: dict[str, tuple[int, str]] = {}
    for i, step in enumerate(spec["steps"]):
        if "run" not in step or step.get("name", "").startswith("install bakery"):
            continue
        assert i == 0 or "if" not in step or "!cancelled()" in step["if"], step
        output, summary = tmp / f"output-{i}", tmp / "summary.md"
        output.write_text("")
        env = {**env_base, **{k: resolve(v, ctx) for k, v in (step.get("env") or {}).items()}}
        env.update(GITHUB_OUTPUT=str(output), GITHUB_STEP_SUMMARY=str(summary))
        proc = subprocess.run(
            ["bash", "-e", "-o", "pipefail", "-c", step["run"]],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,  # a guard against a hang, not a measure of speed
        )
        outputs = dict(
            line.split("=", 1) for line in output.read_text().splitlines() if "=" in line
        )
        if "id" in step:
            steps_ctx[step["id"]] = {"outputs": outputs}
        done[step.get("name", f"step {i}")] = (proc.returncode, proc.stdout + proc.stderr)
    return done


# --- the team's project ------------------------------------------------------------------------


@pytest.fixture
def team(
    cli: Cli, home: Path, index: Index, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Path:
    """myteam, made with init and refresh on 1.0.0; 1.1.0 takes it, 1.2.0 does not."""
    other = Y_PY.replace("line 5\n", "line five\n")
    for version, text in (("1.0.0", Y_PY), ("1.1.0", Y_PY), ("1.2.0", other)):
        index.add(f"vllm-{version}.tar.gz", sdist(version, files=2, modules={"vllm/y.py": text}))
    r = cli("init", "myteam", "--vllm", "1.0.0")
    assert r.exit_code == 0, r.output
    series = home / "launcher" / "myteam"
    toml = series / "series.toml"
    # its tests read files: bakery's own environment is enough
    toml.write_text(toml.read_text().replace('env = "full"', 'env = "light"'))
    (series / "tests" / "test_example.py").unlink()
    (series / "tests" / "test_myteam.py").write_text(SERIES_TEST)
    work = home / "work" / "myteam"
    y = work / "vllm" / "y.py"
    y.write_text(y.read_text().replace("line 5\n", "line 5 (myteam)\n"))
    r = cli("refresh", "myteam", "--tree", work, "--new-diff", "change")
    assert r.exit_code == 0, r.output
    assert [p.name for p in (series / "diffs").iterdir()] == ["01-change.diff"]
    # bakery and the stand-in gh on PATH, as on a runner after "install bakery"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    gh = bin_dir / "gh"
    gh.write_text(
        GH.format(
            python=sys.executable, state=str(tmp_path / "issues.json"), log=str(tmp_path / "gh.log")
        )
    )
    gh.chmod(gh.stat().st_mode | stat.S_IXUSR)
    path = f"{bin_dir}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    monkeypatch.setenv("PATH", path)
    return home


def issues(tmp_path: Path) -> list[dict[str, Any]]:
    state = tmp_path / "issues.json"
    return json.loads(state.read_text()) if state.exists() else []


def context(home: Path, **inputs: str) -> dict[str, Any]:
    return {
        "inputs": {"python": "3.11", "bakery": "", "issues": "true", **inputs},
        "github": {"workspace": str(home), "token": "t0ken", "repository": "team/repo"},
        "vars": {},
    }


@pytest.mark.slow
def test_the_reusable_workflow_rebakes_a_second_series_end_to_end(
    team: Path, tmp_path: Path
) -> None:
    workflow = yaml.safe_load(REBAKE.read_text())
    assert set(workflow[True]["workflow_call"]["inputs"]) >= {
        "series", "since", "python", "gpu-runs-on",
    }  # fmt: skip
    ctx = context(team, series="myteam")

    plan = run_job(workflow, "plan", ctx, team, tmp_path)
    code, out = plan["bakery ci plan"]
    assert code == 0, out
    matrix = json.loads(out.split("matrix: ", 1)[1].splitlines()[0])
    # the oldest release is the series' base, read from series.toml
    assert matrix == {
        "include": [{"series": "myteam", "vllm": v} for v in ("1.0.0", "1.1.0", "1.2.0")]
    }

    codes: dict[str, dict[str, int]] = {}
    for entry in matrix["include"]:
        job_ctx = {**ctx, "matrix": entry}
        steps = run_job(workflow, "rebake", job_ctx, team, tmp_path)
        codes[entry["vllm"]] = {name.split(" ")[0]: c for name, (c, _) in steps.items()}
        if entry["vllm"] != "1.2.0":
            assert all(c == 0 for c, _ in steps.values()), steps
    reports = team / "reports"
    for v in ("1.0.0", "1.1.0"):
        report = json.loads((reports / f"myteam-{v}.json").read_text())
        assert report["verify"] == "passed"
        assert "1 passed" in (reports / f"myteam-{v}.verify.log").read_text()
        assert (reports / f"myteam-{v}.junit.xml").is_file()
    # 1.2.0: the bake fails, verify says why without running, the issue is opened
    assert codes["1.2.0"]["bake"] == 1 and codes["1.2.0"]["verify"] == 1, codes
    assert codes["1.2.0"]["the"] == 0  # the issue step did its work
    opened = issues(tmp_path)
    assert [(i["number"], i["title"], i["state"]) for i in opened] == [
        (1, "bakery: myteam on vLLM 1.2.0", "open")
    ]
    assert "- bake: failed (exit 1)" in opened[0]["body"]

    # the next red day: the same issue, edited; never a second one
    (reports / "myteam-1.2.0.ci").unlink()
    run_job(
        workflow, "rebake", {**ctx, "matrix": {"series": "myteam", "vllm": "1.2.0"}}, team, tmp_path
    )
    assert len(issues(tmp_path)) == 1
    calls = [json.loads(line)[:2] for line in (tmp_path / "gh.log").read_text().splitlines()]
    assert calls.count(["issue", "create"]) == 1 and calls.count(["issue", "edit"]) == 1

    # the summary job joins every release's report
    summary = run_job(workflow, "summary", ctx, team, tmp_path)
    code, out = summary["join the reports"]
    assert code == 1, out  # 1.2.0 does not bake
    text = (team / "summary.md").read_text()
    assert all(v in text for v in ("1.0.0", "1.1.0", "1.2.0")), text


def test_a_green_release_closes_its_open_issue(team: Path, tmp_path: Path, cli: Cli) -> None:
    (tmp_path / "issues.json").write_text(
        json.dumps([{"number": 1, "title": "bakery: myteam on vLLM 1.0.0", "state": "open"}])
    )
    reports = team / "reports"
    reports.mkdir()
    (reports / "myteam-1.0.0.ci").write_text(json.dumps({"steps": {"bake": 0, "verify": 0}}))
    r = cli("ci", "issue", "myteam", "--vllm", "1.0.0", "--reports", reports)
    assert r.exit_code == 0, r.output
    assert "issue #1 closed" in r.output
    assert issues(tmp_path)[0]["state"] == "closed"
    # green with no open issue: nothing to do, nothing opened
    r = cli("ci", "issue", "myteam", "--vllm", "1.0.0", "--reports", reports)
    assert "issue none" in r.output and len(issues(tmp_path)) == 1


def test_the_plan_names_series_and_refuses_a_series_without_base(
    team: Path, cli: Cli, home: Path
) -> None:
    r = cli("ci", "plan", "myteam", "--since", "1.1")
    assert json.loads(r.stdout) == {
        "include": [{"series": "myteam", "vllm": v} for v in ("1.1.0", "1.2.0")]
    }
    r = cli("ci", "plan", "--vllm", "1.0.0")
    assert json.loads(r.stdout) == {"include": [{"series": "myteam", "vllm": "1.0.0"}]}
    (home / "launcher" / "nobase" / "diffs").mkdir(parents=True)
    r = cli("ci", "plan")
    assert r.exit_code == 2 and "no base release" in r.stderr, r.output
    r = cli("ci", "bake", "myteam", "--vllm", "../x")
    assert r.exit_code == 2 and "a vLLM release version" in r.stderr


def test_env_key_is_the_full_environments_and_empty_for_light(
    team: Path, cli: Cli, home: Path
) -> None:
    from bakery.verifying import fullenv
    from bakery.verifying import requirements as reqfiles

    tree = home / "build" / "myteam-1.0.0"
    (tree / "requirements").mkdir(parents=True)
    (tree / "requirements" / "common.txt").write_text("msgspec\n")
    assert cli("ci", "env-key", "myteam", "--vllm", "1.0.0").stdout == "\n"  # light
    toml = home / "launcher" / "myteam" / "series.toml"
    toml.write_text(toml.read_text().replace('env = "light"', 'env = "full"'))
    key = cli("ci", "env-key", "myteam", "--vllm", "1.0.0").stdout.strip()
    reqs = reqfiles.requirements(tree, cpu=True)
    assert key == fullenv.env_key(reqs, fullenv.pins()) and key.startswith("py")
    # another requirement: another key (the CI cache is keyed by the requirements)
    (tree / "requirements" / "common.txt").write_text("msgspec\npydantic\n")
    assert cli("ci", "env-key", "myteam", "--vllm", "1.0.0").stdout.strip() != key


ZIZMOR = Path(sys.executable).parent / "zizmor"


@pytest.mark.skipif(not ZIZMOR.exists(), reason="zizmor is in the dev extra")
def test_the_workflows_written_for_a_team_call_the_reusable_ones_and_pass_zizmor(
    cli: Cli, home: Path
) -> None:
    (home / "launcher" / "myteam" / "diffs").mkdir(parents=True)
    sha = "0123456789abcdef0123456789abcdef01234567"
    r = cli("ci", "workflows", "myteam", "--uses", f"someorg/bakery@{sha}", "--since", "0.31")
    assert r.exit_code == 0, r.output
    written = home / ".github" / "workflows" / "bakery.yml"
    data = yaml.safe_load(written.read_text())
    rebake, port = data["jobs"]["rebake"], data["jobs"]["port"]
    assert rebake["uses"] == f"someorg/bakery/.github/workflows/bakery-rebake.yml@{sha}"
    assert port["uses"] == f"someorg/bakery/.github/workflows/bakery-port.yml@{sha}"
    assert rebake["with"]["series"] == "myteam" and rebake["with"]["since"] == "0.31.0"
    assert sha in rebake["with"]["bakery"]
    # the reusable workflow takes every input the caller passes
    inputs = yaml.safe_load(REBAKE.read_text())[True]["workflow_call"]["inputs"]
    assert set(rebake["with"]) <= set(inputs)
    assert set(port["with"]) <= set(
        yaml.safe_load(PORT.read_text())[True]["workflow_call"]["inputs"]
    )
    done = subprocess.run(
        [str(ZIZMOR), "--offline", "--no-progress", str(written)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    # nothing replaced; a branch name is not a commit
    again = cli("ci", "workflows", "myteam", "--uses", f"someorg/bakery@{sha}")
    assert again.exit_code == 2 and "exists" in again.stderr
    written.unlink()
    r = cli("ci", "workflows", "--uses", "someorg/bakery@main")
    assert r.exit_code == 2 and "40-hex commit" in r.stderr


def test_bakerys_own_workflows_call_the_reusable_ones_for_dcp2() -> None:
    flows = ROOT / ".github" / "workflows"
    rebake = yaml.safe_load((flows / "rebake.yml").read_text())["jobs"]["rebake"]
    assert rebake["uses"].endswith(".github/workflows/bakery-rebake.yml")
    assert rebake["with"]["series"] == "dcp2"
    port = yaml.safe_load((flows / "port.yml").read_text())["jobs"]["port"]
    assert port["uses"].endswith(".github/workflows/bakery-port.yml")
    # the reusable ones run bakery's commands, never bakery's own test suite
    for flow in (REBAKE, PORT):
        text = flow.read_text()
        assert "pytest" not in text and "make test" not in text and "dcp2" not in text
    # the port workflow updates its branch and pull request instead of failing on them
    text = PORT.read_text()
    assert "git switch -C" in text and "gh pr edit" in text and "gh issue create" not in text


def test_the_gpu_job_runs_verify_gpu_and_is_skipped_without_labels() -> None:
    gpu = yaml.safe_load(REBAKE.read_text())["jobs"]["gpu"]
    assert gpu["if"] == "${{ inputs.gpu-runs-on != '' }}"
    assert gpu["runs-on"] == "${{ fromJSON(inputs.gpu-runs-on) }}"
    runs = "\n".join(s.get("run", "") for s in gpu["steps"])
    assert 'bakery ci verify "$SERIES" --vllm "$VLLM" --reports reports --gpu' in runs


def test_a_port_left_unproven_has_one_issue(team: Path, tmp_path: Path, cli: Cli) -> None:
    report = tmp_path / "port-myteam-1.2.0.txt"
    report.write_text(textwrap.dedent("01-change.diff: vllm/y.py hunk 1: failed\n"))
    for _ in range(2):
        r = cli("ci", "issue", "myteam", "--vllm", "1.2.0", "--port", report)
        assert r.exit_code == 0, r.output
    found = issues(tmp_path)
    assert [(i["title"], i["state"]) for i in found] == [
        ("bakery: port myteam to vLLM 1.2.0", "open")
    ]
    assert "hunk 1: failed" in found[0]["body"]
