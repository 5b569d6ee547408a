"""The checks' site folders: what the look before the checks and the scan after them see."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

import pytest

from loop_orchestrator.verify import pyenv, sitescan


def site_with_a_package(tmp_path: Path) -> tuple[Path, Path]:
    site = tmp_path / "site-packages"
    pkg = site / "pkg"
    pkg.mkdir(parents=True)
    (site / "six.py").write_text("x = 1\n", encoding="utf-8")
    (pkg / "__init__.py").write_text("", encoding="utf-8")
    (pkg / "core.py").write_text("def run():\n    return 1\n", encoding="utf-8")
    return site, pkg


def baseline_of(site: Path) -> pyenv.SiteBaseline:
    files = pyenv.fingerprint([site])
    return pyenv.SiteBaseline(roots=[str(site)], files=files, digests={sitescan.digest(files)})


def test_a_hook_added_and_removed_again_leaves_its_folder_changed(tmp_path: Path) -> None:
    site, _pkg = site_with_a_package(tmp_path)
    baseline = baseline_of(site)
    assert pyenv.changes(baseline, shallow=True) == []  # the look before the checks: clean
    # planted after that look, run by the checks, removed by itself before the scan after
    planted = site / "zz.pth"
    planted.write_text("import os\n", encoding="utf-8")
    planted.unlink()
    assert pyenv.changes(baseline) == [f"changed {site}"]


def test_an_edit_deep_in_a_package_is_seen_after_the_checks_not_before(tmp_path: Path) -> None:
    site, pkg = site_with_a_package(tmp_path)
    baseline = baseline_of(site)
    core = pkg / "core.py"
    st = core.stat()
    core.write_text("def run():\n    return 2\n", encoding="utf-8")  # same size
    os.utime(core, ns=(st.st_atime_ns, st.st_mtime_ns))  # mtime put back: ctime is not
    assert pyenv.changes(baseline, shallow=True) == []  # the roots only: not looked at
    assert pyenv.changes(baseline) == [f"changed {core}"]


def test_a_start_up_hook_is_seen_by_the_look_before_the_checks(tmp_path: Path) -> None:
    site, _pkg = site_with_a_package(tmp_path)
    baseline = baseline_of(site)
    (site / "sitecustomize.py").write_text("import os\n", encoding="utf-8")
    (site / "newpkg").mkdir()
    assert pyenv.changes(baseline, shallow=True) == [
        f"added {site / 'sitecustomize.py'}",
        f"added {site / 'newpkg'}",
        f"changed {site}",
    ]


def test_a_first_compile_in_a_package_is_no_change_but_in_a_site_root_it_is(
    tmp_path: Path,
) -> None:
    site, pkg = site_with_a_package(tmp_path)
    baseline = baseline_of(site)
    # an honest first import of an environment installed without byte code
    (pkg / "__pycache__").mkdir()
    (pkg / "__pycache__" / "core.cpython-311.pyc").write_bytes(b"\0" * 16)
    assert pyenv.changes(baseline, shallow=True) == []
    assert pyenv.changes(baseline) == []
    # anything else new beside it still counts, the folder with it
    (pkg / "extra.py").write_text("", encoding="utf-8")
    assert pyenv.changes(baseline) == [
        f"added {pkg / '__pycache__'}",
        f"added {pkg / 'extra.py'}",
        f"changed {pkg}",
    ]
    (pkg / "extra.py").unlink()
    # in a site root, where .pth files and sitecustomize live, a new __pycache__ counts
    (site / "__pycache__").mkdir()
    assert pyenv.changes(baseline) == [f"added {site / '__pycache__'}", f"changed {site}"]


def test_what_is_written_inside_a_pycache_never_counts(tmp_path: Path) -> None:
    site, pkg = site_with_a_package(tmp_path)
    (pkg / "__pycache__").mkdir()
    baseline = baseline_of(site)
    (pkg / "__pycache__" / "core.cpython-311.pyc").write_bytes(b"\0" * 16)
    assert pyenv.changes(baseline) == []


def test_the_scan_in_its_own_process_sees_what_the_scan_in_process_sees(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    site, pkg = site_with_a_package(tmp_path)
    baseline = baseline_of(site)
    assert pyenv.scan_digest([str(site)]) in baseline.digests
    in_process: list[int] = []
    real = pyenv.fingerprint

    def counted(roots: Iterable[Path], *, shallow: bool = False) -> dict[str, sitescan.FileStat]:
        in_process.append(1)
        return real(roots, shallow=shallow)

    monkeypatch.setattr(pyenv, "fingerprint", counted)
    assert pyenv.changes(baseline) == [] and in_process == []  # the digest was enough
    (pkg / "__pycache__").mkdir()  # no change, but another state: judged in process once
    assert pyenv.changes(baseline) == [] and in_process == [1]
    assert pyenv.changes(baseline) == [] and in_process == [1]  # then known
    core = pkg / "core.py"
    core.write_text("def run():\n    return 2\n", encoding="utf-8")
    assert pyenv.changes(baseline) == [f"changed {core}"]
    assert pyenv.changes(baseline) == [f"changed {core}"]  # a change is never learnt


def base_site_folders() -> list[Path]:
    """The site folders of the interpreter virtual environments here are made from."""
    base = Path(sys.base_prefix) / "bin" / Path(sys.executable).name
    if not base.exists():
        base = Path(sys.base_prefix) / "bin" / "python3"
    ask = "import json, site; print(json.dumps(site.getsitepackages()))"
    res = subprocess.run(
        [str(base), "-I", "-S", "-c", ask],
        capture_output=True,
        text=True,
        check=True,
    )
    found = [Path(p).resolve() for p in json.loads(res.stdout) if Path(p).is_dir()]
    assert found, f"{base} has no site folder: these tests need one"
    return found


def venv_in(repo: Path, *flags: str) -> Path:
    venv = repo / ".venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", *flags, str(venv)], check=True)
    return venv


def test_a_venv_without_the_system_site_packages_is_scanned_without_its_bases(
    tmp_path: Path,
) -> None:
    base = base_site_folders()
    venv = venv_in(tmp_path)
    roots = pyenv.check_roots(tmp_path, [[".venv/bin/python", "-m", "pytest"]])
    assert next(venv.glob("lib/python*/site-packages")).resolve() in roots
    assert venv / "pyvenv.cfg" in roots
    # its base's folders are not on its path: nothing there can reach a check
    assert not set(base) & {r.resolve() for r in roots}


def test_a_venv_with_the_system_site_packages_is_scanned_with_its_bases(tmp_path: Path) -> None:
    venv_in(tmp_path, "--system-site-packages")
    roots = {r.resolve() for r in pyenv.check_roots(tmp_path, [[".venv/bin/python", "-m", "x"]])}
    assert set(base_site_folders()) <= roots


def test_a_venv_switched_to_the_system_site_packages_after_the_start_is_a_change(
    tmp_path: Path,
) -> None:
    # the gaming agent: the base's folders are not scanned, so it lets the checks load them
    venv = venv_in(tmp_path)
    baseline = pyenv.take_baseline(tmp_path, [[".venv/bin/python", "-m", "pytest"]])
    cfg = venv / "pyvenv.cfg"
    text = cfg.read_text(encoding="utf-8")
    assert "include-system-site-packages = false" in text
    cfg.write_text(text.replace("= false", "= true"), encoding="utf-8")
    assert f"changed {cfg.absolute()}" in pyenv.changes(baseline, shallow=True)


def home_line(cfg: Path) -> str:
    """The ``home = ...`` line of a venv's ``pyvenv.cfg`` (where its base interpreter is)."""
    return next(ln for ln in cfg.read_text(encoding="utf-8").splitlines() if ln.startswith("home"))


def sys_path_of(python: Path) -> set[Path]:
    ask = "import json, sys; print(json.dumps(sys.path))"
    res = subprocess.run([str(python), "-I", "-c", ask], capture_output=True, text=True, check=True)
    return {Path(p).resolve() for p in json.loads(res.stdout)}


def test_a_second_pyvenv_cfg_planted_beside_the_interpreter_is_a_change(tmp_path: Path) -> None:
    """The gaming this check was not written for: the venv's own ``pyvenv.cfg`` left as it
    is, a second one in ``bin/``, which Python reads first, lets the checks load the base
    interpreter's folders (shown on the real interpreter); the look before the checks
    reports it."""
    venv = venv_in(tmp_path)
    python = venv / "bin" / "python"
    baseline = pyenv.take_baseline(tmp_path, [[".venv/bin/python", "-m", "pytest"]])
    assert not set(base_site_folders()) & sys_path_of(python)
    home = home_line(venv / "pyvenv.cfg")
    planted = venv / "bin" / "pyvenv.cfg"
    planted.write_text(f"{home}\ninclude-system-site-packages = true\n", encoding="utf-8")
    assert set(base_site_folders()) <= sys_path_of(python)  # (the attack works on Python)
    assert f"added {planted.absolute()}" in pyenv.changes(baseline, shallow=True)


@pytest.mark.parametrize(
    ("said", "included"),
    [
        ("version = 3.11.7\n", True),  # not said: the base's folders count
        ("include-system-site-packages = false\n", False),
        ("Include-System-Site-Packages =  FALSE  \n", False),
        ("include-system-site-packages = true\n", True),
        ("include-system-site-packages = false\ninclude-system-site-packages = true\n", True),
        ("include-system-site-packages = no\n", False),  # only "true" is true
        ("include-system-site-packages false\n", True),  # no "=": not a setting
    ],
)
def test_a_pyvenv_cfg_is_read_as_pythons_site_module_reads_it(
    tmp_path: Path, said: str, included: bool
) -> None:
    assert pyenv.system_site_included(said) is included
    # and so the venv's interpreter reads it: its base's folders on its path or not
    venv = venv_in(tmp_path)
    cfg = venv / "pyvenv.cfg"
    home = home_line(cfg)
    cfg.write_text(f"{home}\n{said}", encoding="utf-8")
    assert (set(base_site_folders()) <= sys_path_of(venv / "bin" / "python")) is included
