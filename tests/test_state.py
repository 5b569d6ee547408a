"""The run state store: atomic writes under real concurrency, the ledger, error messages."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers.runs import STATUS_KEYS
from pydantic import ValidationError

from loop_orchestrator.errors import StateError
from loop_orchestrator.files import atomic_write_text
from loop_orchestrator.runstate.state import (
    Phase,
    RunDir,
    RunState,
    Store,
    TaskStatus,
)

REPO_ROOT = Path(__file__).resolve().parent.parent
WRITERS = 8

# One writer process: waits for the start file, then rewrites status/t.json many times.
# Each version is self-consistent (note names wave and rework_count), and big enough that
# a torn write would be visible to a reader.
WRITER = r"""
import sys, time
from pathlib import Path
from loop_orchestrator.files import atomic_write_text
from loop_orchestrator.runstate.state import RunDir, Store, TaskStatus

repo, wid, count, mode = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
store = Store(RunDir(repo))
go = repo / "go"
deadline = time.monotonic() + 30
while not go.exists() and time.monotonic() < deadline:
    time.sleep(0.002)
pad = "x" * 150_000
for i in range(count):
    status = TaskStatus(task="t", wave=wid, rework_count=i, note=f"{wid}:{i}:{pad}")
    if mode == "store":
        if i % 2:
            store.update_status("t", wave=wid, rework_count=i, note=f"{wid}:{i}:{pad}")
        else:
            store.write_status(status)
    elif mode == "atomic":
        atomic_write_text(store.dirs.status_path("t"), status.model_dump_json())
    else:  # "naive": what atomic_write_text exists to prevent
        text = status.model_dump_json()
        with open(store.dirs.status_path("t"), "w", encoding="utf-8") as fh:
            fh.write(text[: len(text) // 2])
            fh.flush()
            time.sleep(0.002)
            fh.write(text[len(text) // 2 :])
"""

LEDGER_WRITER = r"""
import sys
from pathlib import Path
from loop_orchestrator.runstate.state import RunDir, Store

repo, wid, count = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
store = Store(RunDir(repo))
for i in range(count):
    store.append_ledger("tick", writer=wid, i=i, pad="y" * (i * 97 % 5000))
"""


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO_ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def hammer(repo: Path, mode: str, count: int) -> tuple[int, int, list[str]]:
    """Run WRITERS writer processes against one status file while this process reads it.

    Returns (reads, distinct versions seen, problems seen by the reader).
    """
    store = Store(RunDir(repo))
    store.write_status(TaskStatus(task="t", note="0:0:"))
    path = store.dirs.status_path("t")
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(repo), str(w), str(count), mode],
            env=child_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for w in range(1, WRITERS + 1)
    ]
    (repo / "go").write_text("go")
    reads, problems, versions = 0, [], set()
    deadline = time.monotonic() + 120
    try:
        while any(p.poll() is None for p in procs):
            assert time.monotonic() < deadline, "writers did not finish in time"
            data = path.read_bytes()
            reads += 1
            try:
                status = TaskStatus.model_validate_json(data)
            except ValidationError as exc:
                problems.append(f"invalid read of {len(data)} bytes: {exc.errors()[0]['msg']}")
                continue
            note = status.note or ""
            wid, i, _ = note.split(":", 2)
            if status.wave and (int(wid), int(i)) != (status.wave, status.rework_count):
                problems.append(f"mixed versions: {note[:20]!r} in wave {status.wave}")
            versions.add(status.note[:20] if status.note else "")
    finally:
        for p in procs:
            _, err = p.communicate(timeout=60)
            assert p.returncode == 0, err.decode()
    return reads, len(versions), problems


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["store", "atomic"])
def test_readers_never_see_a_half_written_status(tmp_path: Path, mode: str) -> None:
    reads, versions, problems = hammer(tmp_path, mode, count=20)
    assert problems == []
    assert reads > 20
    assert versions > 2  # the reader really saw the file change under it
    final = Store(RunDir(tmp_path)).read_status("t")
    assert final.rework_count == 19
    leftovers = [p.name for p in (tmp_path / ".orchestration" / "status").iterdir()]
    assert leftovers == ["t.json"]  # no temp file left behind


@pytest.mark.slow
def test_the_reader_does_detect_torn_writes(tmp_path: Path) -> None:
    # The harness above must be able to fail: plain open/write is caught half-written.
    _, _, problems = hammer(tmp_path, "naive", count=20)
    assert any(p.startswith("invalid read") for p in problems)


@pytest.mark.slow
def test_ledger_appends_from_many_processes(tmp_path: Path) -> None:
    count = 40
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", LEDGER_WRITER, str(tmp_path), str(w), str(count)],
            env=child_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for w in range(WRITERS)
    ]
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err.decode()
    lines = (tmp_path / ".orchestration" / "ledger.jsonl").read_text().splitlines()
    assert len(lines) == WRITERS * count
    records = [json.loads(line) for line in lines]
    assert {(r["writer"], r["i"]) for r in records} == {
        (w, i) for w in range(WRITERS) for i in range(count)
    }
    assert all(r["event"] == "tick" and r["ts"] for r in records)
    # each writer's own events stay in order
    for w in range(WRITERS):
        assert [r["i"] for r in records if r["writer"] == w] == list(range(count))
    assert len(Store(RunDir(tmp_path)).read_ledger()) == WRITERS * count


def test_read_ledger_skips_a_torn_last_line(tmp_path: Path) -> None:
    store = Store(RunDir(tmp_path))
    store.append_ledger("one", n=1)
    store.append_ledger("two", n=2)
    with store.dirs.ledger.open("a", encoding="utf-8") as fh:
        fh.write('{"ts": "x", "event": "thr')
    assert [r["event"] for r in store.read_ledger()] == ["one", "two"]
    assert Store(RunDir(tmp_path / "empty")).read_ledger() == []


def test_atomic_write_replaces_and_leaves_no_temp_file(tmp_path: Path) -> None:
    target = tmp_path / "deep" / "file.json"
    atomic_write_text(target, "first")
    atomic_write_text(target, "second")
    assert target.read_text() == "second"
    assert [p.name for p in target.parent.iterdir()] == ["file.json"]


def test_atomic_write_failure_keeps_the_old_content(tmp_path: Path) -> None:
    target = tmp_path / "file.json"
    atomic_write_text(target, "old")
    with pytest.raises(TypeError):
        atomic_write_text(target, 42)  # type: ignore[arg-type]
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["file.json"]


def test_status_roundtrip_update_and_extra_keys(tmp_path: Path) -> None:
    store = Store(RunDir(tmp_path))
    store.write_status(TaskStatus(task="a", wave=2))
    first = store.read_status("a")
    assert (first.phase, first.wave, first.rework_count) == (Phase.PENDING, 2, 0)
    assert first.updated_at
    new = store.update_status("a", phase=Phase.PLANNING, note="go")
    assert store.read_status("a") == new
    assert new.phase == Phase.PLANNING and new.wave == 2 and new.note == "go"
    assert new.updated_at >= first.updated_at
    # keys written by a newer version survive a read-modify-write
    path = store.dirs.status_path("a")
    data = json.loads(path.read_text())
    data["future_field"] = {"x": 1}
    path.write_text(json.dumps(data))
    store.update_status("a", note="again")
    assert json.loads(path.read_text())["future_field"] == {"x": 1}
    # an invalid change is refused and nothing is written
    before = path.read_text()
    with pytest.raises(ValidationError):
        store.update_status("a", phase="dancing")
    assert path.read_text() == before
    # a misspelt field is a programming error, not a new key beside an unchanged phase
    with pytest.raises(TypeError, match="phse"):
        store.update_status("a", phse=Phase.VERIFYING)
    assert path.read_text() == before


def test_status_contract_keys(tmp_path: Path) -> None:
    store = Store(RunDir(tmp_path))
    store.write_status(TaskStatus(task="a"))
    data = json.loads(store.dirs.status_path("a").read_text())
    for key in STATUS_KEYS:
        assert key in data, key


def test_list_statuses_is_sorted_and_empty_without_a_run(tmp_path: Path) -> None:
    store = Store(RunDir(tmp_path))
    assert store.list_statuses() == []
    for t in ("b", "c", "a"):
        store.write_status(TaskStatus(task=t))
    assert [s.task for s in store.list_statuses()] == ["a", "b", "c"]


def test_missing_and_corrupt_state_are_clear_errors(tmp_path: Path) -> None:
    store = Store(RunDir(tmp_path))
    with pytest.raises(StateError) as info:
        store.read_status("ghost")
    assert "no status for task 'ghost'" in info.value.render()
    assert "lo-orch status" in info.value.render()
    with pytest.raises(StateError) as info:
        store.read_run()
    assert "lo-orch plan" in info.value.render()
    store.write_status(TaskStatus(task="a"))
    store.dirs.status_path("a").write_text("{not json")
    with pytest.raises(StateError) as info:
        store.read_status("a")
    assert str(store.dirs.status_path("a")) in info.value.message
    assert "not a valid TaskStatus" in info.value.message


def run_state(tmp_path: Path) -> RunState:
    return RunState(
        name="r",
        repo=str(tmp_path),
        base_ref="main",
        base_sha="0" * 40,
        staging_branch="lo/r/staging",
        feature_branch="feat/r",
        plan_sha256="f" * 64,
    )


def test_run_roundtrip_and_update(tmp_path: Path) -> None:
    store = Store.for_repo(tmp_path)
    assert not store.has_run()
    store.write_run(run_state(tmp_path))
    assert store.has_run()

    def approve(s: RunState) -> None:
        s.approved_plan_sha256 = s.plan_sha256

    updated = store.update_run(approve)
    again = store.read_run()
    assert again.approved_plan_sha256 == "f" * 64
    assert again == updated
    assert again.updated_at


def test_run_dir_layout(tmp_path: Path) -> None:
    d = RunDir(tmp_path)
    root = tmp_path.resolve() / ".orchestration"
    assert d.root == root
    assert d.plan_json == root / "plan.json"
    assert d.run_json == root / "run.json"
    assert d.conflict_matrix == root / "conflict-matrix.md"
    assert d.status_path("a") == root / "status" / "a.json"
    assert d.brief_path("a") == root / "briefs" / "a.md"
    assert d.agent_plan_path("a") == root / "plans" / "a.md"
    assert d.review_path("a", 2) == root / "reviews" / "a-r2.md"
    assert d.task_evidence_dir("a") == root / "evidence" / "a"
    assert d.ledger == root / "ledger.jsonl"
    assert d.supervisor_lock == root / "supervisor.lock"
    assert d.worktree_path("r", "a") == tmp_path.resolve() / ".worktrees" / "r" / "a"


def test_atomic_write_never_writes_through_a_name_planted_where_its_temp_file_goes(
    tmp_path: Path,
) -> None:
    """The temp file's name is predictable (this process, its thread, a count): a symlink
    or a file someone put there first is left alone (made with O_EXCL) and the write still
    lands whole, through a random name."""
    import os
    import threading

    from loop_orchestrator import files

    victim = tmp_path / "victim.txt"
    victim.write_text("untouched")
    target = tmp_path / "view.json"
    coming = next(files._tmp_count) + 1
    own = f"{os.getpid()}-{threading.get_ident()}"
    planted = [tmp_path / f".view.json.{own}-{coming + i}.tmp" for i in range(3)]
    for link in planted:
        link.symlink_to(victim)
    for text in ("first", "second"):
        files.atomic_write_text(target, text, durable=False)
        assert target.read_text() == text and not target.is_symlink()
    assert victim.read_text() == "untouched"
    assert all(link.is_symlink() for link in planted)  # left as they were
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["victim.txt", "view.json", *(p.name for p in planted)]
    )
