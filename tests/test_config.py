"""Manifest and composition errors: each names the file, the line where it can, and the fix."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from wikirag import CompositionError, ManifestError, NotFound, WikiragError, Workspace
from wikirag.config import MAX_YAML_BYTES, read_yaml
from wikirag.errors import ConfigError

from .conftest import make_wiki

GOOD_MANIFEST = "name: omega\ntitle: Omega\nsensitivity: public\n"


@pytest.mark.parametrize(
    ("manifest", "expected"),
    [
        (GOOD_MANIFEST, None),
        ("name: omega\ntitle: Omega\nsensitivity: public\nsensitivty: internal\n",
         r"\.wiki\.yaml:4: unknown key 'sensitivty': remove it \(did you mean 'sensitivity'\?\)"),
        ("name: omega\ntitle: Omega\n", r"missing required key 'sensitivity': add it \(the wiki's level, one of public"),
        ("name: omega\ntitle: Omega\nsensitivity: secret\n", r"\.wiki\.yaml:3: key 'sensitivity': 'secret' is not a sensitivity level"),
        ("name: omega\ntitle: [1, 2]\nsensitivity: public\n", r"\.wiki\.yaml:2: key 'title': Input should be a valid string"),
        ("name: omega\ntitle: Omega\nsensitivity: public\ntags: oops\n", r":4: key 'tags': Input should be a valid list"),
        ("name: omega\ntitle: Omega\nsensitivity: public\nchunking: {max_tokens: 5}\n", r":4: key 'chunking.max_tokens': Input should be greater than or equal to 32"),
        ("name: omega\ntitle: Omega\nsensitivity: public\nchunking: {size: 100}\n", r":4: unknown key 'chunking.size'"),
        ("name: Omega/../x\ntitle: Omega\nsensitivity: public\n", r":1: key 'name': name 'Omega/../x' is not allowed"),
        ("name: other\ntitle: Omega\nsensitivity: public\n", r"name 'other' differs from its folder 'omega'"),
        ("name: omega\ntitle: Omega\n  sensitivity: public\n", r"\.wiki\.yaml:3: invalid YAML"),
        ("- just\n- a list\n", r"\.wiki\.yaml:1: expected a mapping"),
        ("", r"expected a mapping"),
    ],
)
def test_manifest_errors(ws: Workspace, home: Path, manifest: str, expected: str | None) -> None:
    folder = home / "wikis" / "omega"
    folder.mkdir()
    (folder / ".wiki.yaml").write_text(manifest, encoding="utf-8")
    if expected is None:
        assert ws.wiki("omega").name == "omega"
        return
    with pytest.raises(ManifestError, match=expected):
        ws.wiki("omega")


def test_missing_manifest_says_how_to_create_it(ws: Workspace, home: Path) -> None:
    (home / "wikis" / "bare").mkdir()
    with pytest.raises(ManifestError, match=r"\.wiki\.yaml: file not found\. Create it with 'wikirag build bare"):
        ws.wiki("bare")


@pytest.mark.parametrize("name", ["../alpha", "/etc", "a/b", "..", "Alpha", "al pha", ".hidden", ""])
def test_path_tricks_in_names_are_refused(ws: Workspace, name: str) -> None:
    with pytest.raises(WikiragError, match="not allowed"):
        ws.wiki(name)
    with pytest.raises(WikiragError):
        ws.composition(name) if "/" not in name else ws.composition_path(name + "x")


def test_unknown_wiki_lists_the_available_ones(ws: Workspace) -> None:
    with pytest.raises(NotFound, match="no wiki 'zeta'.*available: alpha, beta, delta, gamma"):
        ws.wiki("zeta")


@pytest.mark.parametrize(
    ("composition", "expected"),
    [
        ("sensitivity: internal\nwikis: [alpha, beta]\n", None),
        ("sensitivity: public\nwikis: [alpha, zeta]\n", r"x\.yaml:2: unknown wiki 'zeta': available: alpha$"),
        ("sensitivity: public\nwikis:\n  - alpha\n  - beta\n",
         r"x\.yaml:4: wiki 'beta' is internal, above the composition's sensitivity public: remove it or raise"),
        ("sensitivity: internal\nwikis: [alpha, alpha]\n", r"wiki\(s\) listed twice: alpha"),
        ("sensitivity: internal\nwikis: []\n", r"key 'wikis': List should have at least 1 item"),
        ("sensitivity: internal\nwikis: [alpha]\nweights: {beta: 2}\n", r"weights names 'beta', which is not in 'wikis'"),
        ("sensitivity: internal\nwikis: [alpha]\nweights: {alpha: 0}\n", r"weight of 'alpha' is 0.0"),
        ("sensitivity: internal\nwikis: [alpha]\nfusion: magic\n", r":3: key 'fusion': unknown fusion 'magic': use one of .*rrf"),
        ("sensitivity: internal\nwikis: [alpha]\nk: 0\n", r":3: key 'k': Input should be greater than or equal to 1"),
        ("sensitivity: internal\nwikis: [alpha]\nmodels: x\n", r":3: unknown key 'models'"),
        ("name: other\nsensitivity: internal\nwikis: [alpha]\n", r"x\.yaml:1: name 'other' differs from the file name 'x'"),
        ("wikis: [alpha]\n", r"missing required key 'sensitivity'"),
        ("sensitivity: internal\nwikis: [../gamma]\n", r"wiki name '\.\./gamma' is not allowed"),
    ],
)
def test_composition_errors(ws: Workspace, home: Path, composition: str, expected: str | None) -> None:
    (home / "rags" / "x.yaml").write_text(composition, encoding="utf-8")
    if expected is None:
        assert [w.name for w in ws.composition("x").wikis] == ["alpha", "beta"]
        return
    with pytest.raises(CompositionError, match=expected):
        ws.composition("x")


def test_composition_by_path_and_unknown_name(ws: Workspace, home: Path, tmp_path: Path) -> None:
    path = tmp_path / "mine.yaml"
    path.write_text("sensitivity: public\nwikis: [alpha]\n")
    assert ws.composition(str(path)).name == "mine"
    with pytest.raises(NotFound, match="no composition 'nope'.*available: open, secret, team, top"):
        ws.composition("nope")


def test_check_lists_every_problem(ws: Workspace, home: Path) -> None:
    assert ws.check() == []
    (home / "wikis" / "beta" / ".wiki.yaml").write_text("name: beta\ntitle: B\nsensitivity: restricted\n")
    (home / "rags" / "broken.yaml").write_text("sensitivity: public\nwikis: [nope]\n")
    problems = ws.check()
    assert any("wiki 'beta' is restricted, above the composition's sensitivity internal" in p for p in problems)
    assert any("unknown wiki 'nope'" in p for p in problems)


# hostile YAML: every file goes through config.read_yaml, which bounds the work before doing it ------------

ALIAS_FIX = r"remove the anchor/alias \(&name / \*name\): wikirag files do not use them"


def billion_laughs(levels: int = 9) -> str:
    """Nine levels of nine aliases each: a few hundred bytes that name 9**9 (387 million) strings."""
    names = "abcdefghijklmnopqrstuvwxyz"
    lines = [f"{names[0]}: &{names[0]} [" + ", ".join(['"lol"'] * 9) + "]"]
    lines += [f"{names[i]}: &{names[i]} [" + ", ".join([f"*{names[i - 1]}"] * 9) + "]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


BOUNDED_PROBE = """
import resource, sys, time
resource.setrlimit(resource.RLIMIT_AS, (2 * 2**30, 2 * 2**30))  # a regression fails here, not the machine
from wikirag import Workspace
started = time.perf_counter()
try:
    ws = Workspace(sys.argv[1])
    ws.composition(sys.argv[3]) if sys.argv[2] == "composition" else ws.wiki(sys.argv[3])
    print("loaded")
except Exception as exc:
    print(f"{type(exc).__name__}: {exc}")
print(f"{time.perf_counter() - started:.3f}")
"""


def _load_bounded(home: Path, kind: str, name: str) -> tuple[str, float]:
    """Load a composition or wiki in a subprocess capped at 2 GB and 60 s: (its error or 'loaded', seconds)."""
    out = subprocess.run([sys.executable, "-c", BOUNDED_PROBE, str(home), kind, name], capture_output=True,
                         text=True, timeout=60, check=True)
    message, seconds = out.stdout.rstrip("\n").rsplit("\n", 1)
    return message, float(seconds)


def test_a_billion_laughs_composition_is_refused_at_once(home: Path) -> None:
    (home / "rags" / "bomb.yaml").write_text("sensitivity: public\nwikis: [alpha]\n" + billion_laughs())
    assert (home / "rags" / "bomb.yaml").stat().st_size < 700
    message, seconds = _load_bounded(home, "composition", "bomb")
    assert re.fullmatch(rf"CompositionError: \S+/rags/bomb\.yaml:3: YAML anchor '&a' is not allowed: {ALIAS_FIX}",
                        message), message
    assert seconds < 5, seconds
    started = time.perf_counter()
    with pytest.raises(CompositionError, match=r"bomb\.yaml:3: YAML anchor '&a'"):
        Workspace(home).composition("bomb")
    assert time.perf_counter() - started < 5


def test_a_billion_laughs_manifest_is_refused_at_once(home: Path) -> None:
    make_wiki(home, "boom", {"a.md": "# A\n\nText.\n"}, extra=billion_laughs())
    message, seconds = _load_bounded(home, "wiki", "boom")
    assert re.fullmatch(rf"ManifestError: \S+/boom/\.wiki\.yaml:4: YAML anchor '&a' is not allowed: {ALIAS_FIX}",
                        message), message
    assert seconds < 5, seconds


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("sensitivity: public\nwikis: &w [alpha]\n", r"x\.yaml:2: YAML anchor '&w' is not allowed"),
        ("sensitivity: public\nwikis: *w\n", r"x\.yaml:2: YAML alias '\*w' is not allowed"),  # undefined, too
        ("base: &b {k: 3}\nsensitivity: public\nwikis: [alpha]\n<<: *b\n", r"x\.yaml:1: YAML anchor '&b'"),
        ("sensitivity: public\nwikis: [alpha]\nweights:\n  alpha: &one 1\n", r"x\.yaml:4: YAML anchor '&one'"),
        ("sensitivity: public\nwikis: [alpha]\nx: " + "[" * 60 + "]" * 60 + "\n",
         r"x\.yaml:3: nested more than 50 levels deep: flatten it"),
        ("sensitivity: public\nwikis: [alpha]\nk: " + "1" * 5000 + "\n",
         r"x\.yaml:3: invalid value \(Exceeds the limit .*digits.*\): fix the value at that line"),
    ],
)
def test_anchors_aliases_deep_nesting_and_huge_numbers_are_refused(home: Path, text: str, expected: str) -> None:
    (home / "rags" / "x.yaml").write_text(text)
    with pytest.raises(CompositionError, match=expected) as caught:
        Workspace(home).composition("x")
    if "anchor" in expected or "alias" in expected:
        assert str(caught.value).endswith("remove the anchor/alias (&name / *name): wikirag files do not use them")


def test_an_oversized_file_is_refused_before_it_is_read(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = home / "rags" / "big.yaml"
    path.write_text("sensitivity: public\nwikis: [alpha]\n" + "# padding\n" * (MAX_YAML_BYTES // 10))
    size = path.stat().st_size
    assert size > MAX_YAML_BYTES

    def no_parse(*args, **kwargs):
        raise AssertionError("an oversized file was opened")

    monkeypatch.setattr(Path, "open", no_parse)
    with pytest.raises(CompositionError, match=rf"big\.yaml: too large \({size:,} bytes, over the limit of 1 MB "
                                               r"for a wikirag YAML file\): check it is the right file and shorten"):
        Workspace(home).composition("big")


def test_a_file_that_grows_past_the_limit_while_read_is_refused(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "grows.yaml"
    path.write_text("a: 1\n" + "#" * (MAX_YAML_BYTES + 10))
    real_stat = Path.stat
    monkeypatch.setattr(Path, "stat", lambda self, **kw: os.stat_result((0,) * 6 + (10,) + (0,) * 3)
                        if self == path else real_stat(self, **kw))  # stat says 10 bytes, as /proc files do
    with pytest.raises(ConfigError, match=r"grows\.yaml: too large \(over the limit of 1 MB"):
        read_yaml(path, ConfigError, "")


def test_a_file_at_the_limit_still_loads(home: Path) -> None:
    head = "sensitivity: public\nwikis: [alpha]\n"
    path = home / "rags" / "full.yaml"
    path.write_text(head + "#" * (MAX_YAML_BYTES - len(head) - 1) + "\n")
    assert path.stat().st_size == MAX_YAML_BYTES
    assert [w.name for w in Workspace(home).composition("full").wikis] == ["alpha"]


def test_users_and_access_files_refuse_aliases(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from wikirag.users import ACCESS_ENV, UserStore, sso_user

    users = home / "users.yaml"
    users.write_text("users:\n  ann: &ann {password: x, clearance: public}\n  bob: *ann\n")
    with pytest.raises(ConfigError, match=rf"users\.yaml:2: YAML anchor '&ann' is not allowed: {ALIAS_FIX}"):
        UserStore(users).load()
    access = home / "access.yaml"
    access.write_text("unknown: refuse\n" + billion_laughs())
    monkeypatch.setenv(ACCESS_ENV, str(access))
    with pytest.raises(ConfigError, match=rf"access\.yaml:2: YAML anchor '&a' is not allowed: {ALIAS_FIX}"):
        sso_user("ann@example.org", home)


def test_cli_list_and_query_do_not_hang_on_a_bomb(home: Path) -> None:
    from wikirag import build
    from wikirag.cli import cli

    build(Workspace(home).wiki("alpha"))
    (home / "rags" / "bomb.yaml").write_text("sensitivity: public\nwikis: [alpha]\n" + billion_laughs())
    make_wiki(home, "boom", {"a.md": "# A\n\nText.\n"}, extra=billion_laughs())
    runner = CliRunner()
    started = time.perf_counter()
    listed = runner.invoke(cli, ["--home", str(home), "list", "--clearance", "restricted"])
    assert listed.exit_code == 0, listed.output
    assert re.search(rf"warning: \S+/boom/\.wiki\.yaml:4: YAML anchor '&a' is not allowed: {ALIAS_FIX}",
                     listed.stderr), listed.stderr
    assert re.search(rf"warning: \S+/rags/bomb\.yaml:3: YAML anchor '&a' is not allowed: {ALIAS_FIX}",
                     listed.stderr), listed.stderr
    assert "alpha" in listed.stdout
    # a composition whose level cannot be read is only named to a caller cleared for everything
    queried = runner.invoke(cli, ["--home", str(home), "query", "bomb", "compost", "--clearance", "restricted"])
    assert queried.exit_code == 1
    assert re.search(rf"Error: \S+/rags/bomb\.yaml:3: YAML anchor '&a' is not allowed: {ALIAS_FIX}", queried.stderr)
    hidden = runner.invoke(cli, ["--home", str(home), "query", "bomb", "compost"])
    assert hidden.exit_code == 1 and hidden.stderr.startswith("Error: ") and "internal error" not in hidden.stderr
    fine = runner.invoke(cli, ["--home", str(home), "query", "open", "compost"])  # the bomb next door harms nothing
    assert fine.exit_code == 0, fine.output
    assert "alpha/compost.md" in fine.stdout
    assert time.perf_counter() - started < 30
