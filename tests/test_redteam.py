"""The red-team's findings on names, levels and sources, reproduced and closed.

Above a caller's clearance a wiki or composition must be indistinguishable from one that does not
exist, in every message (library, CLI); ``wikirag check`` keeps full detail and says so. A file
reachable from two wikis takes the higher level for both.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from wikirag import Workspace, build
from wikirag.access import Level
from wikirag.cli import cli
from wikirag.errors import CompositionError, NotFound, WikiragError
from wikirag.retrieval import search

from .conftest import make_wiki

# words that name or describe what sits above a public caller; none may reach a public caller
SECRETS = ["SECRET_PROJECT_ZEUS", "Project Zeus", "typo-wiki", "sec2", "gamma", "delta", "secret-hr", "zeus",
           "confidential", "restricted", "GAMMA-CONFIDENTIAL-MARK", "CONFIDENTIAL-MARKER-7731", "team", "top",
           "secret"]


@pytest.fixture
def hostile(home: Path) -> Path:
    """The fixture workspace plus the red-team's files: broken manifests with secrets in them, a
    confidential composition naming a missing wiki, and a hand-written public composition."""
    (home / "wikis" / "secret-hr").mkdir()
    (home / "wikis" / "secret-hr" / ".wiki.yaml").write_text(
        'name: secret-hr\ntitle: HR\nsensitivity: "restricted: Project Zeus layoffs list"\n')
    make_wiki(home, "zeus", {"plan.md": "# Plan\n\nThe plan of the project, in detail and at length.\n"},
              sensitivity="restricted", extra="SECRET_PROJECT_ZEUS: 1\n")
    (home / "rags" / "sec2.yaml").write_text("sensitivity: confidential\nwikis:\n  - gamma\n  - typo-wiki\n")
    (home / "hand.yaml").write_text("sensitivity: public\nwikis: [alpha, gamma, secret-hr, missing-one]\n")
    ws = Workspace(home, recheck_seconds=0)
    for name in ("alpha", "beta", "gamma", "delta"):
        build(ws.wiki(name))
    return home


def _clean(text: str, allowed: tuple[str, ...] = ()) -> list[str]:
    return [word for word in SECRETS if word in text and word not in allowed]


def test_list_shows_a_public_caller_nothing_above_them(hostile: Path) -> None:
    for args in (["list"], ["list", "--json"]):
        result = CliRunner().invoke(cli, ["--home", str(hostile), *args, "--clearance", "public"])
        assert result.exit_code == 0, result.output
        assert _clean(result.stdout + result.stderr) == [], result.output
    listed = json.loads(CliRunner().invoke(cli, ["--home", str(hostile), "list", "--json"]).stdout)
    assert [w["name"] for w in listed["wikis"]] == ["alpha"] and [c["name"] for c in listed["compositions"]] == ["open"]


@pytest.mark.parametrize("asked", ["secret", "top", "sec2", "no-such-thing"])
def test_a_composition_above_the_caller_reads_like_a_missing_one(hostile: Path, asked: str) -> None:
    ws = Workspace(hostile, recheck_seconds=0)
    with pytest.raises(NotFound) as err:
        search(ws, asked, "keys", clearance="public")
    message = str(err.value)
    assert message == (f"no composition '{asked}' that you may use (it does not exist, or it is above your "
                       "clearance): available to you: open")
    cli_result = CliRunner().invoke(cli, ["--home", str(hostile), "query", asked, "keys"])
    assert cli_result.exit_code == 1 and f"Error: {message}" in cli_result.stderr
    assert _clean(cli_result.output, allowed=(asked,)) == []


def test_wikis_above_the_caller_read_like_missing_ones_in_a_composition(hostile: Path) -> None:
    ws = Workspace(hostile, recheck_seconds=0)
    with pytest.raises(CompositionError) as err:
        search(ws, hostile / "hand.yaml", "keys", clearance="public")
    lines = str(err.value).splitlines()
    assert [line.split(": ", 1)[1] for line in lines] == [
        f"unknown wiki '{name}': available: alpha" for name in ("gamma", "secret-hr", "missing-one")]
    assert _clean(str(err.value), allowed=("gamma", "secret-hr", "secret")) == []  # only the names it was given
    # an ad hoc selection (the app's chat) says the same
    with pytest.raises(CompositionError, match="unknown wiki 'gamma': available: alpha$"):
        ws.adhoc(["gamma"], "public")
    # a caller who may see gamma learns why it does not fit; a restricted one sees the broken manifest
    with pytest.raises(CompositionError, match="wiki 'gamma' is confidential, above the composition's"):
        search(ws, hostile / "hand.yaml", "keys", clearance="confidential")
    with pytest.raises(CompositionError, match="Project Zeus"):
        search(ws, hostile / "hand.yaml", "keys", clearance="restricted")


def test_check_keeps_full_detail_and_says_so(hostile: Path) -> None:
    result = CliRunner().invoke(cli, ["--home", str(hostile), "check"])
    assert result.exit_code == 1
    assert "operator view: full detail" in result.stderr
    for word in ("SECRET_PROJECT_ZEUS", "Project Zeus", "typo-wiki"):
        assert word in result.stderr


def _overlapping(home: Path, how: str) -> Workspace:
    """A public wiki whose source covers a confidential wiki's pages, in one of three ways."""
    outside = home.parent / "extdocs"
    (outside / "secret").mkdir(parents=True)
    (outside / "guide.md").write_text("# Guide\n\nPublic guide to the rotation of the office plants.\n")
    (outside / "secret" / "vault.md").write_text("# Vault\n\nCONFIDENTIAL-MARKER-7731 rotation of the vault keys.\n")
    make_wiki(home, "docs-secret", {}, sensitivity="confidential", extra=f"source: {outside / 'secret'}\n")
    if how == "folder":
        source = str(outside)
    elif how == "glob":
        source = f"{outside}/**/*.md"
    else:  # a symlink to the folder, inside the public wiki's own folder
        (home / "links").mkdir()
        os.symlink(outside, home / "links" / "docs")
        source = str(home / "links" / "docs")
    make_wiki(home, "docs-pub", {}, extra=f"source: {source}\n")
    (home / "rags" / "docs.yaml").write_text("sensitivity: public\nwikis: [docs-pub]\n")
    ws = Workspace(home, recheck_seconds=0)
    build(ws.wiki("docs-pub"))
    build(ws.wiki("docs-secret"))
    return ws


@pytest.mark.parametrize("how", ["folder", "glob", "symlink"])
def test_overlapping_sources_take_the_higher_level(home: Path, how: str) -> None:
    ws = _overlapping(home, how)
    assert ws.level_of("docs-pub") is Level.CONFIDENTIAL and ws.wiki("docs-pub").level is Level.PUBLIC
    with pytest.raises(CompositionError, match="unknown wiki 'docs-pub'"):
        search(ws, "docs", "vault keys rotation", clearance="public")
    with pytest.raises(WikiragError):
        ws.adhoc(["docs-pub"], "public")
    listed = CliRunner().invoke(cli, ["--home", str(home), "list", "--json", "--clearance", "public"])
    assert "docs-pub" not in listed.stdout and "7731" not in listed.output
    # a confidential caller may use it, and sees it as confidential
    found = search(ws, ws.adhoc(["docs-pub"], "confidential"), "vault keys rotation", clearance="confidential")
    assert any("CONFIDENTIAL-MARKER-7731" in p.text for p in found.passages)
    checked = CliRunner().invoke(cli, ["--home", str(home), "check"])
    assert checked.exit_code == 1
    assert "wikis 'docs-pub' (public" in checked.stderr and "'docs-secret' (confidential" in checked.stderr
    assert "1 file(s) reachable from both" in checked.stderr and "both are treated as confidential" in checked.stderr


def test_a_public_wiki_pointing_at_another_wikis_folder(home: Path) -> None:
    make_wiki(home, "copycat", {}, extra="source: ../gamma\n")
    (home / "rags" / "copy.yaml").write_text("sensitivity: public\nwikis: [copycat]\n")
    ws = Workspace(home, recheck_seconds=0)
    build(ws.wiki("copycat"))
    assert ws.level_of("copycat") is Level.CONFIDENTIAL
    with pytest.raises(CompositionError, match="unknown wiki 'copycat'"):
        search(ws, "copy", "keys", clearance="public")


def test_an_alias_bomb_in_a_pages_frontmatter_is_broken_frontmatter(home: Path) -> None:
    levels = "".join(f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 9)}]\n" for i in range(8))
    bomb = f"---\na: &a [x, x, x, x, x, x, x, x, x]\n{levels}tags: *i\n---\n# Body\n\nThe body about compost heaps #real\n"
    make_wiki(home, "bombed", {"page.md": bomb})
    ws = Workspace(home, recheck_seconds=0)
    report = build(ws.wiki("bombed"))  # finishes at once: the frontmatter is refused, not expanded
    assert report.chunks == 1 and report.seconds < 5
    found = search(ws, ws.adhoc(["bombed"], "public"), "compost heaps", clearance="public")
    assert found.passages[0].text.startswith("# Body")


@pytest.mark.parametrize(("exclude", "level"), [
    (["gamma/*", "delta/*", "beta/*"], Level.PUBLIC),   # every other wiki's folder left out as a whole
    (["gamma/**", "delta/*", "beta/*"], Level.PUBLIC),
    (["gamma/keys.md", "delta/*", "beta/*"], Level.CONFIDENTIAL),  # one file out: gamma's folder still overlaps
    (["delta/*", "beta/*"], Level.CONFIDENTIAL),
    ([], Level.RESTRICTED),
])
def test_only_an_exclude_of_a_whole_folder_keeps_two_wikis_apart(home: Path, exclude: list[str], level: Level) -> None:
    make_wiki(home, "all", {}, extra=f"source: ..\nexclude: {exclude + ['all/*']}\n")
    assert Workspace(home, recheck_seconds=0).level_of("all") is level
