"""procinfo.cpu_and_peak_rss: the /proc sampler the benchmarks share."""

from __future__ import annotations

import subprocess
import sys
import time

from loop_orchestrator.sessions.procinfo import cpu_and_peak_rss

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
