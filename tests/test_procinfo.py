"""procinfo: the parent chain that ties a message to its session, and the /proc sampler
the benchmarks share."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from helpers.wait import wait_for

from loop_orchestrator.sessions import procinfo
from loop_orchestrator.sessions.procinfo import cpu_and_peak_rss, waited_cpu

BUSY = (
    "import time\n"
    "block = bytearray(64 * 1024 * 1024)\n"  # touched: 64 MiB of peak RSS
    "for i in range(0, len(block), 4096): block[i] = 1\n"
    "del block\n"  # given back to the system: RSS drops, the high-water mark stays
    "end = time.process_time() + 0.2\n"
    "while time.process_time() < end: pass\n"
    "print('busy done', flush=True)\n"
    "time.sleep(60)\n"
)


def test_a_busy_process_shows_its_cpu_and_peak_rss_and_a_reaped_one_shows_none() -> None:
    child = subprocess.Popen([sys.executable, "-c", BUSY], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "busy done"
        sample = cpu_and_peak_rss(child.pid)
        assert sample is not None
        cpu, peak_kib = sample
        assert cpu >= 0.15  # user + system seconds
        assert peak_kib >= 64 * 1024  # the peak (VmHWM), not the resident size now
    finally:
        child.kill()
        child.wait(timeout=10)
    time.sleep(0.05)
    assert cpu_and_peak_rss(child.pid) is None  # reaped: its /proc entry is gone


def test_the_parent_chain_is_the_kernels_and_read_only_as_far_as_asked(tmp_path: Path) -> None:
    """A child named with spaces and parentheses (its comm) under a shell under us: the chain
    from it is child, shell, this process, then our own parents; a walk stopped early has
    read no further (a pid that vanished ends it)."""
    script = tmp_path / "a) (b c"
    script.write_text("#!/bin/sh\nsleep 30\n", encoding="utf-8")
    script.chmod(0o755)
    shell = subprocess.Popen(["sh", "-c", f"'{script}' & wait"])
    children = Path(f"/proc/{shell.pid}/task/{shell.pid}/children")
    try:
        wait_for(lambda: children.read_text().split(), 10, "the shell's child", interval=0.02)
        child = int(children.read_text().split()[0])
        assert ")" in Path(f"/proc/{child}/stat").read_text()  # the comm the parser must skip
        chain = procinfo.ancestors(child)
        assert chain[:3] == [child, shell.pid, os.getpid()]
        assert chain[3:5] == procinfo.ancestors(os.getppid())[:2]
        walk = procinfo.lineage(child)
        assert [next(walk), next(walk)] == [child, shell.pid]
        assert procinfo.parent_pid(child) == shell.pid
    finally:
        shell.kill()
        shell.wait()
    dead = subprocess.Popen(["true"])
    dead.wait()
    assert procinfo.parent_pid(dead.pid) is None and procinfo.ancestors(dead.pid) == [dead.pid]


def test_the_cpu_of_a_child_counts_once_it_is_waited_for() -> None:
    before = waited_cpu(os.getpid())
    assert before is not None
    busy = "import time\nend = time.process_time() + 0.3\nwhile time.process_time() < end: pass"
    child = subprocess.Popen([sys.executable, "-c", busy])
    assert waited_cpu(os.getpid()) == before  # running: not counted yet
    child.wait()
    after = waited_cpu(os.getpid())
    assert after is not None and after - before >= 0.25


def test_exited_counts_a_zombie_and_start_time_names_one_process() -> None:
    """A child that ended and is not reaped yet (a zombie) has exited: its files are closed
    (what the supervisor lock waits on); a running one has not; once reaped, it is gone and
    has no start time."""
    running = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    ended = subprocess.Popen(["true"])
    try:
        wait_for(lambda: procinfo._stat_fields(ended.pid)[0] == "Z", 10, "a zombie")
        assert procinfo.exited(ended.pid)
        assert not procinfo.exited(running.pid)
        born = procinfo.start_time(running.pid)
        assert born is not None and born.isdigit()
        assert procinfo.start_time(running.pid) == born
    finally:
        running.kill()
        running.wait()
        ended.wait()
    assert procinfo.exited(ended.pid) and procinfo.start_time(ended.pid) is None


#: run in a pid namespace of its own (ids it may hand out again itself, through
#: ns_last_pid): this process stands for task b's pane, a child of it for task a's
REUSED_PID = textwrap.dedent(
    """
    import subprocess
    import time
    from loop_orchestrator.supervisor.inbox import PaneTasks

    a_pane = subprocess.Popen(["sleep", "600"])
    b_pane = os.getpid()
    listed = []

    def tmux_says():
        listed.append(1)
        return {a_pane.pid: "a", b_pane: "b"}

    panes = PaneTasks(tmux_says)
    assert panes.task_of(a_pane.pid) == "a"
    a_pane.kill()
    a_pane.wait()  # task a's pane ended: its id is free
    time.sleep(0.05)  # (start times count 10 ms ticks; ids wrap in minutes at the least)
    with open("/proc/sys/kernel/ns_last_pid", "w") as f:
        f.write(str(a_pane.pid - 1))
    sender = subprocess.Popen(["sleep", "600"])  # in b's session, with the ended pane's id
    assert sender.pid == a_pane.pid, (sender.pid, a_pane.pid)
    print(panes.task_of(sender.pid), len(listed))
    sender.kill()
    """
)


def test_a_process_given_an_ended_panes_id_is_not_taken_for_its_task(tmp_path: Path) -> None:
    """The kernel hands a pane's process id out again once ids wrap around; the supervisor
    asks tmux for the panes again only when a process finds none above it. A process of
    task b's session that got the id of task a's ended pane (here handed to it through
    ns_last_pid, in a pid namespace of the test's own) is b's: its message is not a's."""
    unshare = shutil.which("unshare")
    assert unshare is not None
    script = "import os\n" + REUSED_PID
    namespace = [unshare, "--user", "--map-root-user", "--pid", "--fork", "--mount-proc"]
    out = subprocess.run(
        [*namespace, sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["b", "1"]  # b's, from the list it had (not asked again)
