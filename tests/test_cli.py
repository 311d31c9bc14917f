"""The CLI: exit codes, JSON shapes, help with examples, and every command documented."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from wikirag.cli import cli

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def run(home: Path):
    runner = CliRunner()

    def invoke(*args: str, **env: str):
        return runner.invoke(cli, ["--home", str(home), *args], env=env or None, catch_exceptions=False)

    return invoke


def test_build_all_then_query_json(run) -> None:
    built = run("build", "--all")
    assert built.exit_code == 0, built.output
    assert "alpha: built (2 file(s) chunked): 2 files, 5 chunks, 2 skipped" in built.stdout
    assert "skipped _meta.md: meta file" in built.stdout
    assert "up to date" in run("build", "alpha").stdout

    result = run("query", "team", "how often to water tomatoes", "-k", "2", "--json", "--clearance", "internal")
    assert result.exit_code == 0, result.output
    passages = json.loads(result.stdout)
    assert len(passages) == 2
    for p in passages:
        assert {"rank", "wiki", "path", "start", "end", "line", "heading", "score", "text"} <= set(p)
        assert isinstance(p["start"], int) and isinstance(p["end"], int) and p["end"] > p["start"]
        assert p["contributions"][0]["wiki"] == p["wiki"]
    assert passages[0]["heading"] == "Growing tomatoes > Watering"


def test_query_human_output_cites_wiki_path_line_and_heading(run) -> None:
    run("build", "--all")
    result = run("query", "open", "turn the compost heap", "-k", "1")
    assert result.exit_code == 0
    assert re.match(r"\[1\] alpha/compost\.md:\d+  \(Compost > Turning the heap\)\n    ", result.stdout)


def test_clearance_from_option_and_environment(run) -> None:
    run("build", "--all")
    denied = run("query", "team", "deploys")
    assert denied.exit_code == 1
    assert "Error: no composition 'team' that you may use (it does not exist, or it is above your clearance)" \
        in denied.stderr
    assert "Traceback" not in denied.output
    assert run("query", "team", "deploys", WIKIRAG_CLEARANCE="internal").exit_code == 0


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (("query", "nope", "x"), 1, "no composition 'nope'"),
        (("query", "open", "x", "-k", "0"), 2, "Invalid value for '-k'"),
        (("query", "open"), 2, "Missing argument 'QUESTION'"),
        (("query", "open", "x", "--clearance", "top"), 2, "Invalid value for '--clearance'"),
        (("build",), 2, "give a wiki NAME to build, or --all"),
        (("build", "alpha", "--all"), 2, "either a wiki NAME or --all"),
        (("build", "../etc"), 1, "wiki name '../etc' is not allowed"),
        (("build", "zeta"), 1, "no wiki 'zeta'"),
        (("build", "newwiki", "."), 2, "give --sensitivity"),
        (("frobnicate",), 2, "No such command"),
        (("query", "open", "compost"), 1, "wiki 'alpha' has no index yet: run 'wikirag build alpha'"),
    ],
)
def test_exit_codes(run, args: tuple[str, ...], code: int, message: str) -> None:
    result = run(*args)
    assert result.exit_code == code, result.output
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_stopword_query_prints_a_hint_and_succeeds(run) -> None:
    run("build", "alpha")
    result = run("query", "open", "is it the")
    assert result.exit_code == 0 and result.stdout == ""
    assert "no results: the question has only very common words (stopwords)" in result.stderr


def test_build_with_source_creates_the_manifest(run, home: Path, tmp_path: Path) -> None:
    vault = tmp_path / "vault"
    vault.mkdir()
    (vault / "note.md").write_text("---\ntags: [wiki/Topic]\n---\n# Note\n\nA note that belongs to the topic wiki.\n")
    (vault / "other.md").write_text("# Other\n\nA note that does not carry the tag at all.\n")
    result = run("build", "topic", str(vault), "--tag", "#wiki/Topic", "--sensitivity", "internal")
    assert result.exit_code == 0, result.output
    manifest = (home / "wikis/topic/.wiki.yaml").read_text()
    assert "sensitivity: internal" in manifest and "'#wiki/Topic'" in manifest
    assert "topic: built (2 file(s) chunked): 1 files, 1 chunks" in result.stdout
    assert sorted(p.name for p in vault.iterdir()) == ["note.md", "other.md"]  # nothing written there


def test_list_and_check(run, home: Path) -> None:
    run("build", "alpha")
    listed = json.loads(run("list", "--json", "--clearance", "internal").stdout)
    assert [(w["name"], w["status"]) for w in listed["wikis"]] == [("alpha", "fresh"), ("beta", "missing")]
    assert [c["name"] for c in listed["compositions"]] == ["open", "team"]
    assert listed["hidden"] == 4  # gamma, delta, secret, top
    public = run("list")
    assert "beta" not in public.stdout and "gamma" not in public.stdout
    assert run("check").exit_code == 0
    (home / "rags/bad.yaml").write_text("sensitivity: public\nwikis: [alpha, nope]\nfoo: 1\n")
    (home / "wikis/beta/.wiki.yaml").write_text("name: beta\ntitle: B\n")
    checked = run("check")
    assert checked.exit_code == 1
    assert "bad.yaml:3: unknown key 'foo'" in checked.stderr
    assert "missing required key 'sensitivity'" in checked.stderr
    assert "wiki 'beta' cannot be loaded" in checked.stderr  # team and secret list beta
    assert "Error: 5 problem(s) found" in checked.stderr  # beta, bad, team, secret, top


def _commands() -> list[str]:
    """Every command, with the subcommands of groups (``user add``, …) as well as the group itself."""
    names = []
    for name, command in sorted(cli.commands.items()):
        names.append(name)
        if isinstance(command, click.Group):
            names += [f"{name} {sub}" for sub in sorted(command.commands)]
    return names


def test_the_command_table_includes_subcommands() -> None:
    assert {"user add", "user remove", "user list"} <= set(_commands())


@pytest.mark.parametrize("command", _commands())
def test_every_command_has_help_with_an_example_and_is_in_the_readme(command: str) -> None:
    result = CliRunner().invoke(cli, [*command.split(), "-h"])
    assert result.exit_code == 0
    assert "Example:" in result.stdout
    assert f"wikirag {command}" in (REPO / "README.md").read_text(encoding="utf-8")


def test_python_dash_m_runs_the_cli() -> None:
    result = subprocess.run([sys.executable, "-m", "wikirag", "--help"], capture_output=True, text=True, check=False)
    assert result.returncode == 0 and "build" in result.stdout


def test_build_all_goes_on_past_a_broken_wiki_and_fails_at_the_end(run, home: Path) -> None:
    (home / "wikis/beta/.wiki.yaml").write_text("name: beta\ntitle: B\nsensitivity: internal\nsorce: x\n")
    result = run("build", "--all")
    assert result.exit_code == 1
    assert "alpha: built" in result.stdout and "gamma: built" in result.stdout
    assert ".wiki.yaml:4: unknown key 'sorce': remove it (did you mean 'source'?)" in result.stderr
    assert "1 of 4 wiki(s) failed to build" in result.stderr


def test_build_source_inside_the_workspace_is_stored_relative(run, home: Path) -> None:
    notes = home / "notes"
    notes.mkdir()
    (notes / "a.md").write_text("# A\n\nA note kept inside the workspace, beside the wikis.\n")
    assert run("build", "notes", str(notes), "--sensitivity", "public").exit_code == 0
    assert "source: ../../notes\n" in (home / "wikis/notes/.wiki.yaml").read_text()
    bad = run("build", "notes", "--sensitivity", "secret")
    assert bad.exit_code == 2 and "Invalid value for '--sensitivity'" in bad.stderr
