"""Manifest and composition errors: each names the file, the line where it can, and the fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from wikirag import CompositionError, ManifestError, NotFound, WikiragError, Workspace

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
