"""The supervisor's record: a journal that detects tampering, and a view that cannot steer it."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest
from helpers.runs import run_state

from loop_orchestrator.commands.plan import plan_from_file
from loop_orchestrator.config import Settings
from loop_orchestrator.files import fsync_path
from loop_orchestrator.runstate import create as runs
from loop_orchestrator.runstate import journal as record
from loop_orchestrator.runstate import private
from loop_orchestrator.runstate.journal import NoRecordError, Record, RecordTamperedError
from loop_orchestrator.runstate.progress import status_document
from loop_orchestrator.runstate.state import Phase, RunDir, RunPhase, Store, TaskStatus


def make_record(
    repo: Path, run: str = "demo", tasks: tuple[str, ...] = ("alpha", "beta")
) -> Record:
    return record.start(repo, run_state(repo, run), [TaskStatus(task=t) for t in tasks])


def plan_one_task(repo: Path) -> None:
    plan = repo / "plan.yaml"
    plan.write_text(
        "goal: g\nname: demo\ntasks:\n  - id: alpha\n    title: A\n    objective: o\n"
        "    owns: [a.py]\n    done:\n      - criterion: c\n        check: pytest -q\n",
        encoding="utf-8",
    )
    plan_from_file(repo, plan, Settings())


def lines(rec: Record) -> list[str]:
    return rec.path.read_text(encoding="utf-8").splitlines(keepends=True)


def test_the_record_lives_outside_the_repository_private_to_the_user(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    rec = make_record(repo)
    assert not rec.path.resolve().is_relative_to(repo.resolve())
    assert rec.folder == private.run_dir(repo, "demo")
    assert rec.folder.stat().st_mode & 0o777 == 0o700
    assert (rec.folder / record.KEY_FILE).stat().st_mode & 0o777 == 0o600


def test_changes_survive_a_new_process_and_publish_the_view(tmp_path: Path) -> None:
    rec = make_record(tmp_path)
    rec.update_task("alpha", phase=Phase.LAUNCHING, pane_id="%3")
    rec.update_run(phase=RunPhase.RUNNING)
    again = Record.open(tmp_path, "demo")
    assert again.task("alpha").phase == Phase.LAUNCHING
    assert again.task("alpha").pane_id == "%3"
    assert again.run.phase == RunPhase.RUNNING
    view = json.loads(RunDir(tmp_path).status_path("alpha").read_text(encoding="utf-8"))
    assert view["phase"] == "launching"


def test_a_misspelt_field_is_an_error_not_a_new_key(tmp_path: Path) -> None:
    rec = make_record(tmp_path)
    with pytest.raises(TypeError, match="phse"):
        rec.update_task("alpha", phse=Phase.APPROVED)
    with pytest.raises(ValueError, match="phase"):
        rec.update_task("alpha", phase="shipped")
    assert Record.open(tmp_path, "demo").task("alpha").phase == Phase.PENDING


@pytest.mark.parametrize("attack", ["edit", "drop", "swap", "append", "truncate_mac"])
def test_any_change_to_the_journal_is_detected(tmp_path: Path, attack: str) -> None:
    rec = make_record(tmp_path)
    rec.update_task("alpha", phase=Phase.LAUNCHING)
    rec.update_task("alpha", phase=Phase.PLANNING)
    rec.update_task("beta", phase=Phase.LAUNCHING)
    text = lines(rec)
    if attack == "edit":  # an agent promotes its task, keeping the old mac
        text[2] = text[2].replace('"planning"', '"approved"')
    elif attack == "drop":
        del text[2]
    elif attack == "swap":
        text[2], text[3] = text[3], text[2]
    elif attack == "append":  # a forged entry continuing the chain without the key
        forged = json.loads(text[-1])
        forged["seq"] += 1
        forged["data"] = {"task": "alpha", "set": {"phase": "approved"}}
        text.append(json.dumps(forged) + "\n")
    else:
        entry = json.loads(text[1])
        entry["mac"] = entry["mac"][:-1] + ("0" if entry["mac"][-1] != "0" else "1")
        text[1] = json.dumps(entry) + "\n"
    rec.path.write_text("".join(text), encoding="utf-8")
    with pytest.raises(RecordTamperedError, match="entry"):
        Record.open(tmp_path, "demo")


def test_a_torn_last_line_is_left_for_later_not_fatal(tmp_path: Path) -> None:
    rec = make_record(tmp_path)
    rec.update_task("alpha", phase=Phase.LAUNCHING)
    with rec.path.open("a", encoding="utf-8") as fh:
        fh.write('{"seq": 3, "kind": "task", "da')  # a crash mid-append
    assert Record.open(tmp_path, "demo").task("alpha").phase == Phase.LAUNCHING


def test_an_edited_status_file_changes_nothing_and_is_reported(tmp_path: Path) -> None:
    rec = make_record(tmp_path)
    rec.update_task("alpha", phase=Phase.IMPLEMENTING, delivered="implementing:0")
    path = RunDir(tmp_path).status_path("alpha")
    forged = json.loads(path.read_text(encoding="utf-8"))
    forged.update(phase="approved", commit="f" * 40)
    path.write_text(json.dumps(forged), encoding="utf-8")
    assert rec.check_view() == ["status/alpha.json"]
    assert rec.task("alpha").phase == Phase.IMPLEMENTING
    assert json.loads(path.read_text(encoding="utf-8"))["phase"] == "implementing"
    assert rec.check_view() == []
    # and a new process publishing everything says which files were edited
    RunDir(tmp_path).run_json.write_text(
        '{"name": "demo", "phase": "awaiting_merge_review"}', encoding="utf-8"
    )
    assert Record.open(tmp_path, "demo").publish_all() == ["run.json"]
    assert json.loads(RunDir(tmp_path).run_json.read_text(encoding="utf-8"))["phase"] == (
        "awaiting_plan_approval"
    )


def test_a_verdict_counts_only_for_its_commit_and_its_exact_text(tmp_path: Path) -> None:
    rec = make_record(tmp_path)
    rec.record_verdict("alpha", "c" * 40, True, '{"passed": true}')
    assert rec.verdict_matches("alpha", "c" * 40, '{"passed": true}')
    assert not rec.verdict_matches("alpha", "c" * 40, '{"passed": true }')
    assert not rec.verdict_matches("alpha", "d" * 40, '{"passed": true}')
    assert not rec.verdict_matches("beta", "c" * 40, '{"passed": true}')


def test_approving_another_plan_archives_the_old_journal(tmp_path: Path) -> None:
    rec = make_record(tmp_path)
    rec.update_task("alpha", phase=Phase.LAUNCHING)
    same = make_record(tmp_path)  # approving the same plan again: nothing changes
    assert same.task("alpha").phase == Phase.LAUNCHING
    state = rec.run.model_copy(update={"approved_plan_sha256": "q" * 64, "created_at": "t1"})
    fresh = record.start(tmp_path, state, [TaskStatus(task="alpha")])
    assert fresh.task("alpha").phase == Phase.PENDING
    assert len(list(fresh.folder.glob("journal-*.jsonl"))) == 1


def test_no_record_no_run(git_repo: Path) -> None:
    with pytest.raises(NoRecordError):
        Record.open(git_repo, "nothing")


def test_editing_run_json_does_not_approve_a_plan(git_repo: Path) -> None:
    """An agent writes the approval into run.json itself: `lo-orch run` still refuses."""
    plan_one_task(git_repo)
    path = RunDir(git_repo).run_json
    data = json.loads(path.read_text(encoding="utf-8"))
    data["approved_plan_sha256"] = data["plan_sha256"]
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(Exception, match="has not been approved"):
        runs.load_approved(git_repo)
    runs.approve_plan(git_repo)
    rec, _ = runs.load_approved(git_repo)
    assert rec.run.approved_plan_sha256 == data["plan_sha256"]


def test_status_shows_the_record_whatever_the_files_say(git_repo: Path) -> None:
    plan_one_task(git_repo)
    status = RunDir(git_repo).status_path("alpha")
    status.write_text("{garbled", encoding="utf-8")
    # before approval the files are all there is: a garbled one is left out, not fatal
    assert status_document(git_repo)["tasks"] == []
    runs.approve_plan(git_repo)
    runs.open_record(git_repo).update_task("alpha", phase=Phase.IMPLEMENTING)
    forged = json.loads(status.read_text(encoding="utf-8"))
    forged["phase"] = "integrated"
    status.write_text(json.dumps(forged), encoding="utf-8")
    [task] = status_document(git_repo)["tasks"]
    assert task["phase"] == "implementing"


def test_an_edit_overwritten_by_the_next_publish_is_still_reported(tmp_path: Path) -> None:
    """The agent forges its status, then signals: the supervisor's next write replaces the
    forgery before any periodic look; the edit must not vanish unreported."""
    rec = make_record(tmp_path)
    rec.update_task("alpha", phase=Phase.IMPLEMENTING)
    RunDir(tmp_path).status_path("alpha").write_text('{"phase": "approved"}', encoding="utf-8")
    rec.update_task("alpha", phase=Phase.IMPL_DONE)
    assert rec.check_view() == ["status/alpha.json"]
    assert rec.check_view() == []


def test_a_persons_retry_from_another_process_is_not_an_edit(tmp_path: Path) -> None:
    supervisor = make_record(tmp_path)
    supervisor.update_task("alpha", phase=Phase.BLOCKED, error="stuck")
    person = Record.open(tmp_path, "demo")  # `lo-orch retry` in another process
    person.update_task("alpha", phase=Phase.IMPLEMENTING, error=None)
    supervisor.refresh()
    assert supervisor.task("alpha").phase == Phase.IMPLEMENTING
    assert supervisor.check_view() == []
    # an agent's edit after it is still seen
    RunDir(tmp_path).status_path("alpha").write_text('{"phase": "approved"}', encoding="utf-8")
    assert supervisor.check_view() == ["status/alpha.json"]


def test_a_step_is_fsynced_once_when_it_ends_with_the_record_free_for_others(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading

    rec = make_record(tmp_path)
    synced: list[tuple[int, bool]] = []
    real = fsync_path

    def watched(path: Path) -> None:
        # another thread reads the record while the fsync runs: it is not held up by it
        seen: list[Phase] = []
        reader = threading.Thread(target=lambda: seen.append(rec.task("beta").phase))
        reader.start()
        reader.join(timeout=10)
        synced.append((path.stat().st_size, bool(seen)))
        real(path)

    monkeypatch.setattr("loop_orchestrator.runstate.journal.fsync_path", watched)
    with rec.step():
        rec.update_task("alpha", phase=Phase.LAUNCHING)
        rec.update_task("alpha", pane_id="%3")
        assert synced == []  # nothing waits on a disk inside the step
    # durable when the step returns: one fsync for both, of everything written
    assert synced == [(rec.path.stat().st_size, True)]
    rec.update_task("beta", phase=Phase.LAUNCHING)  # alone, it is its own step
    assert len(synced) == 2 and synced[1] == (rec.path.stat().st_size, True)
    rec.sync()  # nothing new: no fsync
    assert len(synced) == 2
    assert Record.open(tmp_path, "demo").task("alpha").pane_id == "%3"


def test_a_step_not_durable_now_is_made_durable_by_the_next_append(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rec = make_record(tmp_path)
    synced: list[int] = []
    real = fsync_path

    def watched(path: Path) -> None:
        synced.append(path.stat().st_size)
        real(path)

    monkeypatch.setattr("loop_orchestrator.runstate.journal.fsync_path", watched)
    with rec.step(durable=False):  # a hook event's report
        rec.update_task("alpha", last_event="PreToolUse")
    assert synced == []
    reported = rec.path.stat().st_size
    rec.update_task("beta", phase=Phase.LAUNCHING)  # the next durable append covers both
    assert synced == [rec.path.stat().st_size] and synced[0] > reported


def test_steps_that_sync_inside_and_appends_that_sync_after_never_deadlock(
    tmp_path: Path,
) -> None:
    import threading

    rec = make_record(tmp_path, tasks=("alpha", "beta", "gamma", "delta"))

    def work(task: str) -> None:
        for i in range(15):
            with rec.step(durable=False):  # a hook's step that decided something
                rec.update_task(task, note=f"step {i}")
                rec.sync()
            rec.update_task(task, note=f"alone {i}")

    threads = [threading.Thread(target=work, args=(t,)) for t in rec.state.tasks]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads)
    again = Record.open(tmp_path, "demo")
    assert {again.task(t).note for t in again.state.tasks} == {"alone 14"}


def test_an_edit_that_keeps_the_size_and_the_time_of_a_view_file_is_still_reported(
    tmp_path: Path,
) -> None:
    """The view check reads a file again only when its stat changed; an edit in place of
    the same length with its modification time set back still changes its ctime (which
    nobody but the kernel sets), so it is read and reported."""
    rec = make_record(tmp_path)
    rec.update_task("alpha", phase=Phase.IMPLEMENTING, delivered="implementing:0")
    path = RunDir(tmp_path).status_path("alpha")
    assert rec.check_view() == []  # read once and found as published
    assert rec.check_view() == []  # (then known by its stat)
    before = path.stat()
    text = path.read_text(encoding="utf-8")
    forged = text.replace('"implementing"', '"approved"    ', 1)
    assert len(forged) == len(text) and forged != text
    with path.open("r+", encoding="utf-8") as fh:  # in place: the same inode
        fh.write(forged)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = path.stat()
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == (
        before.st_ino,
        before.st_size,
        before.st_mtime_ns,
    )
    assert rec.check_view() == ["status/alpha.json"]
    assert json.loads(path.read_text(encoding="utf-8"))["phase"] == "implementing"


def test_a_view_file_is_known_by_the_stat_it_was_written_with_and_edits_are_still_seen(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The supervisor remembers the stat of each view file it writes (through the descriptor
    that wrote it), so its next write does not read the file back; an edit made right after
    a write, before anything looked, is still reported: in place with the size and the
    modification time kept, or a file renamed over it."""
    read: list[Path] = []
    real = Record._on_disk_digest

    def counted(path: Path) -> str:
        read.append(path)
        return real(path)

    monkeypatch.setattr(Record, "_on_disk_digest", staticmethod(counted))
    rec = make_record(tmp_path)
    path = RunDir(tmp_path).status_path("alpha")
    for n in range(5):
        rec.update_task("alpha", note=f"step {n}")
    assert read == []  # (the old code read the file back at every write but the first)
    assert rec.check_view() == []
    assert read == []

    before = path.stat()
    text = path.read_text(encoding="utf-8")
    forged = text.replace('"step 4"', '"step 9"', 1)
    with path.open("r+", encoding="utf-8") as fh:  # in place: the same inode and size
        fh.write(forged)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    rec.update_task("alpha", note="step 5")
    assert rec.check_view() == ["status/alpha.json"]

    rec.update_task("alpha", note="step 6")
    forged_file = path.with_name("forged.json")
    forged_file.write_text(path.read_text(encoding="utf-8").replace("step 6", "step 0"))
    forged_file.replace(path)
    assert rec.check_view() == ["status/alpha.json"]
    assert json.loads(path.read_text(encoding="utf-8"))["note"] == "step 6"


def test_ledger_lines_from_many_threads_arrive_whole(tmp_path: Path) -> None:
    """Threads appending to the ledger at once (synced and unsynced: the fsync is after the
    lock) each get their whole line in."""
    store = Store(RunDir(tmp_path))
    store.dirs.root.mkdir(parents=True, exist_ok=True)

    def append(n: int) -> None:
        for i in range(40):
            if i % 4:
                store.append_ledger_unsynced("hook", task=f"t{n}", i=i)
            else:
                store.append_ledger("verdict", task=f"t{n}", i=i)

    threads = [threading.Thread(target=append, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    got = sorted((e["task"], e["i"]) for e in store.read_ledger())
    assert got == sorted((f"t{n}", i) for n in range(6) for i in range(40))


def test_what_update_task_holds_is_what_a_replay_of_the_journal_holds(tmp_path: Path) -> None:
    """``update_task`` folds its change once, before it appends (from the data as the
    journal holds it); a change another process appended meanwhile is folded under it,
    not lost; a fresh read of the journal adds up to the same statuses."""
    rec = make_record(tmp_path)
    other = Record.open(tmp_path, "demo")
    rec.update_task("alpha", phase=Phase.LAUNCHING, pane_id="%3", disputes=[{"check": "c"}])
    other.update_task("alpha", note="a person's retry", rework_count=2)  # rec has not read it
    rec.update_task("alpha", phase=Phase.PLANNING, session_id="s-1")
    rec.update_task("beta", relaunches=1)
    got = rec.tasks()
    assert got["alpha"].note == "a person's retry" and got["alpha"].rework_count == 2
    assert got["alpha"].phase == Phase.PLANNING and got["alpha"].pane_id == "%3"
    assert got["alpha"].disputes == [{"check": "c"}]
    replayed = Record.open(tmp_path, "demo").tasks()
    assert {t: s.model_dump() for t, s in got.items()} == {
        t: s.model_dump() for t, s in replayed.items()
    }
    with pytest.raises(ValueError):  # a bad value: refused, nothing appended
        rec.update_task("alpha", rework_count="many")
    assert len(lines(rec)) == len(lines(other))
    assert Record.open(tmp_path, "demo").task("alpha").rework_count == 2


def test_a_change_left_unpublished_is_written_by_the_next_publish_and_only_once(
    tmp_path: Path,
) -> None:
    rec = make_record(tmp_path)
    view = rec.dirs.status_path("alpha")
    rec.update_task("alpha", last_event="SessionStart")
    before = view.read_text(encoding="utf-8")
    rec.update_task("alpha", publish=False, last_event="PreToolUse")
    assert view.read_text(encoding="utf-8") == before
    assert Record.open(tmp_path, "demo").task("alpha").last_event == "PreToolUse"  # recorded
    rec.update_task("alpha", phase=Phase.PLANNING)
    published = json.loads(view.read_text(encoding="utf-8"))
    assert (published["last_event"], published["phase"]) == ("PreToolUse", "planning")
    os.utime(view, ns=(1, 1))
    rec.publish_pending()  # nothing is pending any more: not written again
    assert view.stat().st_mtime_ns == 1
    rec.update_task("beta", publish=False, last_event="Stop")
    rec.publish_pending()
    assert json.loads(rec.dirs.status_path("beta").read_text())["last_event"] == "Stop"
    # a whole republish (at every start) leaves nothing pending either
    rec.update_task("beta", publish=False, last_event="PreToolUse")
    rec.publish_all()
    assert json.loads(rec.dirs.status_path("beta").read_text())["last_event"] == "PreToolUse"
    os.utime(rec.dirs.status_path("beta"), ns=(1, 1))
    rec.publish_pending()
    assert rec.dirs.status_path("beta").stat().st_mtime_ns == 1
    assert rec.check_view() == []  # our own writes are not someone's edits


def test_a_change_to_what_the_task_holds_already_appends_nothing(tmp_path: Path) -> None:
    """A delivery's end is marked by its session's hook and then by the delivery itself:
    the second mark is no change, and costs no entry, fsync or file; a real change to one of
    the fields, a bad value and a change left unpublished are handled as before."""
    rec = make_record(tmp_path)
    view = rec.dirs.status_path("alpha")
    rec.update_task("alpha", delivered="implement:0", delivering=None, pane_id="%3")
    entries = len(lines(rec))
    os.utime(view, ns=(1, 1))
    same = rec.update_task("alpha", delivered="implement:0", delivering=None)
    assert same.delivered == "implement:0" and len(lines(rec)) == entries
    assert view.stat().st_mtime_ns == 1  # not written again
    rec.update_task("alpha", delivered="implement:0", delivering="implement:1")
    assert len(lines(rec)) == entries + 1
    assert Record.open(tmp_path, "demo").task("alpha").delivering == "implement:1"
    with pytest.raises(ValueError):  # a bad value is refused, even where nothing else changes
        rec.update_task("alpha", delivered="implement:0", rework_count="many")
    # unpublished, then the same value published: the file is written (it was behind)
    rec.update_task("alpha", publish=False, last_event="Stop")
    rec.update_task("alpha", last_event="Stop")
    assert json.loads(view.read_text(encoding="utf-8"))["last_event"] == "Stop"
    assert len(lines(rec)) == entries + 2


def test_a_callers_change_to_a_copy_never_reaches_the_record(tmp_path: Path) -> None:
    """``task`` and ``tasks`` hand out copies whose containers are their own (only strings,
    numbers and enums are shared): a caller that changes what it was given, nested dicts and
    a newer version's extra keys included, changes nothing recorded or published."""
    rec = make_record(tmp_path)
    usage = {"input_tokens": 5, "models": {"m": {"cost": 1.0}}}
    rec.update_task("alpha", usage=usage, disputes=[{"check": "c", "note": "n"}])
    rec.append("task", task="alpha", set={"future": {"list": [1]}})  # (a newer version's key)
    for copy in (rec.task("alpha"), rec.tasks()["alpha"]):
        assert copy.usage is not None and copy.model_extra is not None
        copy.usage["models"]["m"]["cost"] = 99.0
        copy.disputes[0]["note"] = "changed"
        copy.disputes.append({"check": "more"})
        copy.model_extra["future"]["list"].append(2)
        copy.note = "changed"
    again = rec.task("alpha")
    assert again.usage == usage and again.disputes == [{"check": "c", "note": "n"}]
    assert again.model_extra == {"future": {"list": [1]}} and again.note is None
    assert again.model_dump() == Record.open(tmp_path, "demo").task("alpha").model_dump()
