"""Layered settings (docs/design.md section 8) and the seed-compatible tool profile."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from loop_orchestrator.config import (
    Settings,
    load_settings,
    load_tool_profile,
    repo_config_path,
    user_config_path,
)
from loop_orchestrator.errors import ConfigError

REPO_ROOT = Path(__file__).resolve().parent.parent


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def user_file(_isolated_home: Path) -> Path:
    # the autouse fixture points XDG_CONFIG_HOME at <home>/.config
    return _isolated_home / ".config" / "loop-orchestrator" / "config.toml"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = tmp_path / "repo"
    path.mkdir()
    return path


def test_defaults_match_the_design() -> None:
    s = load_settings(None)
    assert s == Settings()
    assert s.agent.kind == "claude"
    assert s.agent.command == "claude"
    assert s.agent.permission_mode == "bypassPermissions"
    assert s.agent.pretrust is True
    assert (s.run.concurrency, s.run.max_rework, s.run.stall_minutes) == (4, 3, 20)
    assert s.run.strict_waves is False
    assert s.auditor.llm == "agent"


def test_paths_follow_xdg_and_home(_isolated_home: Path, repo: Path) -> None:
    assert user_config_path() == _isolated_home / ".config" / "loop-orchestrator" / "config.toml"
    assert user_config_path({"HOME": "/h"}) == Path("/h/.config/loop-orchestrator/config.toml")
    assert user_config_path({"HOME": "/h", "XDG_CONFIG_HOME": "/x"}) == Path(
        "/x/loop-orchestrator/config.toml"
    )
    assert repo_config_path(repo) == repo / ".loop-orchestrator" / "config.toml"


def test_every_layer_overrides_the_one_below(
    user_file: Path, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(
        user_file,
        "[run]\nconcurrency = 2\nmax_rework = 5\nstall_minutes = 7\n[auditor]\nllm = 'off'\n",
    )
    s = load_settings(repo)
    assert (s.run.concurrency, s.run.max_rework, s.run.stall_minutes) == (2, 5, 7)

    write(repo_config_path(repo), "[run]\nconcurrency = 3\nmax_rework = 1\n")
    s = load_settings(repo)
    # per key: the repo wins where it speaks, the user file shows through elsewhere
    assert (s.run.concurrency, s.run.max_rework, s.run.stall_minutes) == (3, 1, 7)
    assert s.auditor.llm == "off"

    monkeypatch.setenv("LO_ORCH_RUN_CONCURRENCY", "6")
    s = load_settings(repo)
    assert (s.run.concurrency, s.run.max_rework) == (6, 1)

    s = load_settings(repo, overrides={"run": {"concurrency": 9}})
    assert (s.run.concurrency, s.run.max_rework, s.run.stall_minutes) == (9, 1, 7)


def test_the_repo_layer_needs_a_repo(user_file: Path, repo: Path) -> None:
    write(repo_config_path(repo), "[run]\nconcurrency = 3\n")
    assert load_settings(None).run.concurrency == 4
    assert load_settings(repo).run.concurrency == 3


def test_home_is_used_without_xdg(_isolated_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("XDG_CONFIG_HOME")
    write(
        _isolated_home / ".config" / "loop-orchestrator" / "config.toml", "[run]\nmax_rework = 0\n"
    )
    assert load_settings(None).run.max_rework == 0


@pytest.mark.parametrize(
    ("name", "value", "section", "key", "expected"),
    [
        ("LO_ORCH_RUN_CONCURRENCY", "7", "run", "concurrency", 7),
        ("LO_ORCH_RUN_STRICT_WAVES", "true", "run", "strict_waves", True),
        ("LO_ORCH_RUN_STALL_MINUTES", "0.5", "run", "stall_minutes", 0.5),
        ("LO_ORCH_AGENT_KIND", "scripted", "agent", "kind", "scripted"),
        ("LO_ORCH_AGENT_PERMISSION_MODE", "acceptEdits", "agent", "permission_mode", "acceptEdits"),
        ("LO_ORCH_AGENT_ARGS", '["--model", "x"]', "agent", "args", ["--model", "x"]),
        ("LO_ORCH_AGENT_ENV", '{"A": "1"}', "agent", "env", {"A": "1"}),
        ("LO_ORCH_AUDITOR_LLM", "off", "auditor", "llm", "off"),
        ("LO_ORCH_VERIFY_COMMAND", "pytest -q", "verify", "command", "pytest -q"),
        ("LO_ORCH_WORKSPACE_ALLOW_DIRTY", "true", "workspace", "allow_dirty", True),
    ],
)
def test_environment_variables(
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    value: str,
    section: str,
    key: str,
    expected: object,
) -> None:
    monkeypatch.setenv(name, value)
    s = load_settings(None)
    assert getattr(getattr(s, section), key) == expected


def test_contract_variables_are_not_settings(monkeypatch: pytest.MonkeyPatch, repo: Path) -> None:
    # LO_ORCH_RUN_DIR looks like section `run`, key `dir`: it is the agent env contract.
    for name, value in {
        "LO_ORCH_RUN_DIR": str(repo / ".orchestration"),
        "LO_ORCH_TASK": "a",
        "LO_ORCH_BRIEF": "/x/brief.md",
        "LO_ORCH_BIN": "/usr/bin/lo-orch",
        "LO_ORCH_TMUX_SOCKET": "sock",
        "LO_ORCH_LOG_DIR": "/tmp",
        "LO_ORCH_RUN_NOT_A_KEY": "1",
        "LO_ORCH_NOSECTION_X": "1",
    }.items():
        monkeypatch.setenv(name, value)
    assert load_settings(repo) == Settings()


def test_an_explicit_env_mapping_replaces_os_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LO_ORCH_RUN_CONCURRENCY", "7")
    assert load_settings(None, env={"LO_ORCH_RUN_CONCURRENCY": "2"}).run.concurrency == 2
    assert load_settings(None, env={}).run.concurrency == 4


def test_invalid_values_name_their_source(
    user_file: Path, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(user_file, "[run]\nconcurrency = 0\n")
    with pytest.raises(ConfigError) as info:
        load_settings(repo)
    assert str(user_file) in info.value.message
    assert "run.concurrency" in info.value.message

    write(user_file, "[run]\nconcurrency = 2\n")
    write(repo_config_path(repo), "[agent]\nkind = 'robot'\n")
    with pytest.raises(ConfigError) as info:
        load_settings(repo)
    assert str(repo_config_path(repo)) in info.value.message
    assert "agent.kind" in info.value.message

    write(repo_config_path(repo), "[run]\nconcurency = 3\n")  # a typo is an error
    with pytest.raises(ConfigError) as info:
        load_settings(repo)
    assert str(repo_config_path(repo)) in info.value.message
    assert "concurency" in info.value.message

    repo_config_path(repo).unlink()
    monkeypatch.setenv("LO_ORCH_RUN_MAX_REWORK", "many")
    with pytest.raises(ConfigError) as info:
        load_settings(repo)
    assert "environment (LO_ORCH_*)" in info.value.message
    assert "run.max_rework" in info.value.message

    monkeypatch.delenv("LO_ORCH_RUN_MAX_REWORK")
    with pytest.raises(ConfigError) as info:
        load_settings(repo, overrides={"run": {"concurrency": 100}})
    assert "command-line flags" in info.value.message


def test_invalid_toml_names_the_file(user_file: Path) -> None:
    write(user_file, "[run\nconcurrency = 2\n")
    with pytest.raises(ConfigError) as info:
        load_settings(None)
    assert str(user_file) in info.value.message
    assert "invalid TOML" in info.value.message
    assert info.value.hint


def test_agent_env_is_replaced_not_merged(user_file: Path, repo: Path) -> None:
    write(user_file, "[agent]\nenv = {A = '1', B = '2'}\n")
    write(repo_config_path(repo), "[agent]\nenv = {C = '3'}\n")
    assert load_settings(repo).agent.env == {"C": "3"}


# tool profile ---------------------------------------------------------------------------


def user_tools(home: Path) -> Path:
    return home / ".claude" / "loop-orchestrator" / "tools.json"


def repo_tools(repo: Path) -> Path:
    return repo / ".loop-orchestrator" / "tools.json"


def test_no_profile_is_empty(repo: Path) -> None:
    warnings: list[str] = []
    assert load_tool_profile(repo, warnings=warnings) == {}
    assert warnings == []


def test_profile_merges_per_role_and_per_field(_isolated_home: Path, repo: Path) -> None:
    write(
        user_tools(_isolated_home),
        json.dumps(
            {
                "knowledge": {
                    "kind": "mcp",
                    "ref": "wiki-rag",
                    "how": "wiki_search",
                    "when": "terms",
                },
                "tacit": {"kind": "mcp", "ref": "lore"},
                "plan": {"kind": "skill", "ref": "rtb:plan"},
                "verify": {"kind": "command", "command": "make test"},
            }
        ),
    )
    write(
        repo_tools(repo),
        json.dumps(
            {
                "knowledge": {"ref": "team-wiki", "how": None},  # override one field, drop one
                "tacit": None,  # drop the whole role
                "verify": {"command": "pytest -q"},
                "explore": {"kind": "builtin", "ref": "Grep"},
            }
        ),
    )
    profile = load_tool_profile(repo)
    assert profile == {
        "knowledge": {"kind": "mcp", "ref": "team-wiki", "when": "terms"},
        "plan": {"kind": "skill", "ref": "rtb:plan"},
        "verify": {"kind": "command", "command": "pytest -q"},
        "explore": {"kind": "builtin", "ref": "Grep"},
    }
    # without a repo only the user's profile counts
    assert load_tool_profile(None)["knowledge"]["ref"] == "wiki-rag"


def test_a_role_whose_fields_are_all_dropped_disappears(_isolated_home: Path, repo: Path) -> None:
    write(user_tools(_isolated_home), json.dumps({"plan": {"kind": "skill"}}))
    write(repo_tools(repo), json.dumps({"plan": {"kind": None}}))
    assert load_tool_profile(repo) == {}


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("{not json", "not valid JSON"),
        ('["knowledge"]', "must map each role to an object"),
        ('{"knowledge": "wiki"}', "must map each role to an object"),
    ],
)
def test_an_invalid_profile_is_reported_and_ignored(
    _isolated_home: Path, repo: Path, text: str, why: str
) -> None:
    write(user_tools(_isolated_home), json.dumps({"plan": {"kind": "skill", "ref": "p"}}))
    write(repo_tools(repo), text)
    warnings: list[str] = []
    profile = load_tool_profile(repo, warnings=warnings)
    assert profile == {"plan": {"kind": "skill", "ref": "p"}}  # the good layer still counts
    assert len(warnings) == 1
    assert warnings[0].startswith(str(repo_tools(repo)))
    assert why in warnings[0] and warnings[0].endswith("ignored")


def test_the_example_profile_loads_unchanged(repo: Path) -> None:
    example = json.loads((REPO_ROOT / "examples" / "tools.example.json").read_text())
    write(repo_tools(repo), json.dumps(example))
    warnings: list[str] = []
    assert load_tool_profile(repo, warnings=warnings) == example
    assert warnings == []


def test_profile_env_argument_selects_home(tmp_path: Path, repo: Path) -> None:
    other = tmp_path / "other-home"
    write(user_tools(other), json.dumps({"design": {"kind": "skill", "ref": "d"}}))
    assert load_tool_profile(None) == {}
    assert load_tool_profile(None, env={"HOME": str(other)}) == {
        "design": {"kind": "skill", "ref": "d"}
    }
    assert os.environ["HOME"] != str(other)


def test_cluster_defaults_to_local_tmux_and_reads_ray_settings(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert load_settings(None).cluster.backend == "tmux"
    write(
        repo_config_path(repo),
        "[cluster]\nbackend = 'ray'\naddress = 'ray://head:10001'\ncheckpoint_seconds = 60\n",
    )
    s = load_settings(repo)
    assert (s.cluster.backend, s.cluster.address, s.cluster.checkpoint_seconds) == (
        "ray",
        "ray://head:10001",
        60,
    )
    assert s.cluster.slot_resource == "lo_session"
    monkeypatch.setenv("LO_ORCH_CLUSTER_ADDRESS", "auto")
    assert load_settings(repo).cluster.address == "auto"


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("backend = 'k8s'", "cluster.backend"),
        ("checkpoint_seconds = 0", "cluster.checkpoint_seconds"),
        ("slot_resource = 'two words'", "cluster.slot_resource"),
        ("adress = 'auto'", "cluster.adress"),
    ],
)
def test_a_bad_cluster_setting_names_its_file_and_key(repo: Path, text: str, field: str) -> None:
    write(repo_config_path(repo), f"[cluster]\n{text}\n")
    with pytest.raises(ConfigError) as info:
        load_settings(repo)
    assert str(repo_config_path(repo)) in str(info.value)
    assert field in str(info.value)


def test_max_node_losses_defaults_to_three_and_refuses_nonsense(repo: Path) -> None:
    assert load_settings(None).cluster.max_node_losses == 3
    write(repo_config_path(repo), "[cluster]\nmax_node_losses = 0\n")
    assert load_settings(repo).cluster.max_node_losses == 0  # every lost node fails its task
    for bad in ("-1", "'three'", "2.5", "1000"):
        write(repo_config_path(repo), f"[cluster]\nmax_node_losses = {bad}\n")
        with pytest.raises(ConfigError) as info:
            load_settings(repo)
        assert "cluster.max_node_losses" in str(info.value), bad
