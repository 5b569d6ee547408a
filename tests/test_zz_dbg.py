import time, sys, subprocess, os, signal
sys.path.insert(0, "/work/main/tests")
from test_sessions import Agents, backend  # noqa
from loop_orchestrator.sessions import Deliverer
def test_dbg(backend, tmp_path, tmux_socket):
    agents = Agents(tmp_path, backend, "default: {implement: [[{exit: 9}]]}\n")
    pane = agents.start("crash")
    pid = backend.state(pane).pid
    spid = int(subprocess.run(["tmux", "-L", tmux_socket, "display", "-p", "#{pid}"], capture_output=True, text=True).stdout.strip())
    try:
        Deliverer().deliver(backend, pane, "implement it\n", confirmed=lambda: False, timeout=10)
    except Exception as e:
        print("E", e)
    def st():
        return open(f"/proc/{pid}/stat").read().split()[2] if os.path.exists(f"/proc/{pid}") else "gone"
    print("S0", st()); time.sleep(2); print("S2", st())
    os.kill(spid, signal.SIGCHLD); time.sleep(0.3); print("S3", st(), backend._pane_info(pane).dead_status)
    print(subprocess.run(["cat", f"/proc/{spid}/wchan"], capture_output=True, text=True).stdout)
    assert 0
