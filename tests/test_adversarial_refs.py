"""Sessions that move the run's staging branch themselves, with the OS sandbox off, run
through the real supervisor: the ref is put back within a second, what they made is kept
under quarantine, the session gets a rework round naming it, and its honest retry is what
lands.

The demo's ``slug`` task attacks in its first implementation round and works honestly in
the next (the scripted agent performs round N of its script for rework N). Each attack
writes the forged staging commit and how long staging stayed on it to a file.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from helpers.git import git
from helpers.runs import approve, edit_script, ledger, only

from loop_orchestrator.commands import status
from loop_orchestrator.dashboard import view
from loop_orchestrator.git.refwatch import RefWatch
from loop_orchestrator.runstate.state import Phase, RunDir, Store
from loop_orchestrator.simulator import demo_flow as demo
from loop_orchestrator.supervisor.main import Supervisor
from loop_orchestrator.workspace import integration
from loop_orchestrator.workspace.branches import quarantined

pytestmark = pytest.mark.slow

MARKER = "FORGED-SLUG-9c1e"
STUB = f'def slugify(text, max_length=40):\n    return "{MARKER}"\n'
STAGING = "refs/heads/lo/demo/staging"

# The session commits its stub, merges that commit onto staging the way `git merge` would
# (staging and its commit as parents, the merged tree) and points staging at it; then it
# watches staging and writes down how long its commit stayed there.
#: commits the work, merges it onto staging itself and points staging there (a template)
FORGE_STAGING = """
def git(*args):
    return subprocess.run(["git", "-c", "user.name=agent", "-c", "user.email=a@localhost",
                           *args], capture_output=True, text=True, check=True).stdout.strip()
subprocess.run(["git", "add", "-A"], check=True)
git("commit", "-q", "--no-gpg-sign", "--no-verify", "-m", "my work")
mine = git("rev-parse", "HEAD")
staging = git("rev-parse", "{staging}")
tree = git("merge-tree", "--write-tree", staging, mine).splitlines()[0]
forged = git("commit-tree", "-p", staging, "-p", mine, "-m", "lo-orch: task slug", tree)
git("update-ref", "{staging}", forged)
"""
MERGE_ITSELF = (
    """
import json, os, pathlib, subprocess, sys, time
"""
    + FORGE_STAGING
    + """moved = time.monotonic()
while git("rev-parse", "{staging}") == forged and time.monotonic() - moved < 10:
    time.sleep(0.01)
out = pathlib.Path({out!r})
out.write_text(json.dumps({{"forged": forged, "seconds": time.monotonic() - moved}}))
run_dir, task = os.environ["LO_ORCH_RUN_DIR"], os.environ["LO_ORCH_TASK"]
"""
)

# (b): the run marked ready for review on the forged commit, and Gate 2 tried from inside
CLAIM_REVIEW = """
run_json = pathlib.Path(run_dir, "run.json")
data = json.loads(run_json.read_text())
data.update(phase="awaiting_merge_review", integration={{"commit": forged, "passed": True}})
run_json.write_text(json.dumps(data))
res = subprocess.run(os.environ["LO_ORCH_BIN"].split() + ["merge", "--yes", "--repo", {repo!r}],
                     capture_output=True, text=True)
pathlib.Path({gate!r}).write_text(str(res.returncode) + "\\n" + res.stderr)
"""

# (c): its status file says integrated; it never signals
CLAIM_INTEGRATED = """
status = pathlib.Path(run_dir, "status", task + ".json")
data = json.loads(status.read_text())
data.update(phase="integrated", commit=mine, error=None)
status.write_text(json.dumps(data))
"""


def python_action(code: str) -> dict[str, Any]:
    return {"run": {"argv": [sys.executable, "-c", textwrap.dedent(code)], "check": True}}


def attack_first_round(files: demo.DemoFiles, attack: str, *, signal: bool) -> None:
    """slug's round 0: its tests, a stub, the attack (then impl_done when ``signal``);
    round 1: the demo's honest round."""

    def change(d: dict[str, Any]) -> None:
        honest = d["slug"]["implement"][0]
        tests = next(a for a in honest if a.get("write", {}).get("path") == "tests/test_slug.py")
        attack_round = [
            tests,
            {"write": {"path": "textstats/slug.py", "content": STUB}},
            python_action(attack),
        ]
        if signal:
            attack_round.append({"signal": {"phase": "impl_done"}})
        d["slug"]["implement"] = [attack_round, honest]

    edit_script(files, change)


def run_to_review(files: demo.DemoFiles) -> None:
    settings = demo.demo_settings(files.script)
    settings.sandbox.mode = "off"
    approve(files, settings)
    outcome = Supervisor(files.repo, settings).run()
    assert outcome.state == "review", outcome.message


def assert_repaired_and_reworked(files: demo.DemoFiles, out: Path) -> dict[str, Any]:
    """Staging was put back within a second, the forged commit is kept under quarantine
    (only there), slug was reworked once naming it, and its honest round is on staging."""
    repo = files.repo
    found = json.loads(out.read_text(encoding="utf-8"))
    forged = found["forged"]
    assert found["seconds"] < 1.0, found
    [repaired] = ledger(repo, "refs_repaired")
    assert repaired["ref"] == STAGING and repaired["found"] == forged
    assert repaired["tasks"] == ["slug"] and repaired["by_ancestry"] is True
    assert quarantined(repo, "demo") == [(repaired["kept"], forged)]
    assert repaired["kept"].startswith("refs/lo-orch/quarantine/demo/heads/lo/demo/staging/")
    # named where a person looks: `lo-orch status` (and --json) and the dashboard
    report = status.status(repo)
    assert report.document["run"]["quarantined"] == [{"ref": repaired["kept"], "sha": forged}]
    line = (
        "lo/demo/staging was moved outside lo-orch and put back; what was found there is "
        f"kept: `git log {repaired['kept']}`"
    )
    assert report.quarantined == (line,)
    assert line in view.load_snapshot(repo).needs
    reworks = ledger(repo, "rework", "slug")
    assert [(e["round"], e.get("cause")) for e in reworks] == [(1, "refs_tampered")]
    review = RunDir(repo).review_path("slug", 1).read_text(encoding="utf-8")
    assert "lo/demo/staging was moved outside lo-orch" in review and repaired["kept"] in review
    statuses = {s.task: s for s in Store(RunDir(repo)).list_statuses()}
    assert statuses["slug"].phase is Phase.INTEGRATED and statuses["slug"].rework_count == 1
    staging = git(repo, "rev-parse", STAGING).strip()
    assert staging != forged
    slug_py = git(repo, "show", f"{staging}:textstats/slug.py")
    assert "re.sub" in slug_py and MARKER not in slug_py  # the honest round landed
    # what staging holds is lo-orch's own line of verified trees: the forged merge is not
    # in its history, and no branch but the task's own reaches the stub
    assert forged not in git(repo, "rev-list", staging).split()
    for ref in git(repo, "for-each-ref", "--format=%(refname)", "refs/heads").split():
        if ref != "refs/heads/lo/demo/slug":
            log = subprocess.run(
                ["git", "log", "-p", "-S", MARKER, ref],
                cwd=repo,
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            assert MARKER not in log, f"{ref} reaches the forged stub"
    return repaired


def test_a_session_that_merges_itself_into_staging_is_put_back_and_reworked(
    demo_files: demo.DemoFiles, tmux_socket: str, tmp_path: Path
) -> None:
    """(a) slug merges its own commit into staging, as lo-orch would, and signals; tokenize
    goes on beside it and lands, and Gate 2 lands the honest retry."""
    only(demo_files, "tokenize", "slug")
    out = tmp_path / "forged.json"
    attack_first_round(demo_files, MERGE_ITSELF.format(staging=STAGING, out=str(out)), signal=True)
    run_to_review(demo_files)
    assert_repaired_and_reworked(demo_files, out)
    assert not ledger(demo_files.repo, "rework", "tokenize")  # the other task went on
    integration.merge(demo_files.repo, integration.review(demo_files.repo))
    feat = git(demo_files.repo, "rev-parse", "feat/demo").strip()
    assert "re.sub" in git(demo_files.repo, "show", f"{feat}:textstats/slug.py")
    assert git(demo_files.repo, "show", f"{feat}:textstats/tokenize.py")


def test_a_session_that_claims_the_review_and_merges_is_put_back_and_reworked(
    demo_files: demo.DemoFiles, tmux_socket: str, tmp_path: Path
) -> None:
    """(b) slug points staging at its merge, marks the run ready for review on it, runs
    `lo-orch merge --yes` (refused), then signals."""
    only(demo_files, "slug")
    out, gate = tmp_path / "forged.json", tmp_path / "gate.txt"
    code = MERGE_ITSELF.format(staging=STAGING, out=str(out)) + CLAIM_REVIEW.format(
        repo=str(demo_files.repo), gate=str(gate)
    )
    attack_first_round(demo_files, code, signal=True)
    run_to_review(demo_files)
    assert_repaired_and_reworked(demo_files, out)
    code_line, _, said = gate.read_text(encoding="utf-8").partition("\n")
    assert code_line == "1" and "`lo-orch merge` is a person's decision" in said
    assert ledger(demo_files.repo, "view_edited")  # the forged run.json was undone
    assert "feat/demo" not in git(demo_files.repo, "branch", "--list", "feat/demo")


def test_a_session_that_merges_itself_and_never_signals_is_put_back_and_reworked(
    demo_files: demo.DemoFiles, tmux_socket: str, tmp_path: Path
) -> None:
    """(c) slug merges itself into staging, writes phase=integrated into its status file
    and never signals: the watch sees staging move, no signal needed."""
    only(demo_files, "slug")
    out = tmp_path / "forged.json"
    code = MERGE_ITSELF.format(staging=STAGING, out=str(out)) + CLAIM_INTEGRATED
    attack_first_round(demo_files, code, signal=False)
    run_to_review(demo_files)
    assert_repaired_and_reworked(demo_files, out)
    assert not ledger(demo_files.repo, "task_blocked", "slug")


# The session commits its honest work, points staging at a merge of it (as in MERGE_ITSELF)
# and signals impl_done at once: no wait for anyone to notice
MOVE_AND_GO = (
    """
import json, pathlib, subprocess
"""
    + FORGE_STAGING
    + """pathlib.Path({out!r}).write_text(json.dumps({{"forged": forged}}))
"""
)


def test_a_session_that_moves_staging_and_signals_at_once_owes_its_round_before_its_work_is_judged(
    demo_files: demo.DemoFiles, tmux_socket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """slug does honest work, merges it into staging itself and signals impl_done in the
    same breath, and the watch's news never comes (a machine so loaded that inotify's
    events arrive after the verification; here the watch is switched off): the loop
    reacts at once, but the verification compares the refs before it judges the work, so
    staging is put back and slug owes its round before the work is even committed (no
    step meets the moved ref); its next round lands. (With the verification comparing
    nothing itself, its commit met the moved staging: caught only by that read.)"""
    monkeypatch.setattr(RefWatch, "start", lambda self: None)
    only(demo_files, "slug")
    out = tmp_path / "forged.json"

    def change(d: dict[str, Any]) -> None:
        honest = d["slug"]["implement"][0]
        writes = [a for a in honest if "write" in a]
        attack = python_action(MOVE_AND_GO.format(staging=STAGING, out=str(out)))
        again = [dict(w) for w in writes]  # round 1: the same work, a word more
        for w in again:
            if w["write"]["path"] == "textstats/slug.py":
                body = w["write"]["content"] + "\n# (round 1)\n"
                w["write"] = {"path": "textstats/slug.py", "content": body}
        signal = {"signal": {"phase": "impl_done"}}
        d["slug"]["implement"] = [[*writes, attack, signal], [*again, signal]]

    edit_script(demo_files, change)
    run_to_review(demo_files)
    repo = demo_files.repo
    forged = json.loads(out.read_text(encoding="utf-8"))["forged"]
    events = Store(RunDir(repo)).read_ledger()
    names = [(e["event"], e.get("task")) for e in events]
    [repaired] = ledger(repo, "refs_repaired")
    assert repaired["ref"] == STAGING and repaired["found"] == forged
    assert repaired["tasks"] == ["slug"]
    # put back, and its round owed, before its work was judged at all: the verification
    # compared first, so no step of it met the moved staging (``refs_tampered``)
    first_verdict = names.index(("verdict", "slug"))
    assert events.index(repaired) < first_verdict, names
    assert not ledger(repo, "refs_tampered"), names
    reworks = ledger(repo, "rework", "slug")
    assert [(e["round"], e.get("cause")) for e in reworks] == [(1, "refs_tampered")]
    statuses = {s.task: s for s in Store(RunDir(repo)).list_statuses()}
    assert statuses["slug"].phase is Phase.INTEGRATED and statuses["slug"].rework_count == 1
    staging = git(repo, "rev-parse", STAGING).strip()
    assert forged not in git(repo, "rev-list", staging).split()
    assert "(round 1)" in git(repo, "show", f"{staging}:textstats/slug.py")
    assert quarantined(repo, "demo") == [(repaired["kept"], forged)]
