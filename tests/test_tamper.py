"""A tampered index never serves another wiki's passages: ``.index/CURRENT`` that is a path, a symlinked
build, a build copied from another wiki, a build whose recorded level is above the wiki's level now.

Every case plants a confidential wiki ``runbooks`` (with a unique marker in its page) next to a public
wiki ``guide``, tampers with ``guide``'s index so that it points at or holds ``runbooks``' build, and
checks that a public search of ``guide`` is refused with the fix, that the marker appears in no result,
warning or message, that ``status`` says ``incompatible``, and that the next build recovers.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from wikirag import IndexMissing, Workspace, build, store
from wikirag.cache import IndexCache
from wikirag.cli import cli
from wikirag.errors import WikiragError
from wikirag.index import status
from wikirag.retrieval import search

from .conftest import make_wiki

MARKER = "RUNBOOK-CONFIDENTIAL-7Q3X"
GUIDE = "# Guide\n\nHow to turn the compost heap and where the runbooks of the garden are kept.\n"
RUNBOOKS = f"# Runbooks\n\nRotate the compost vault keys every month. {MARKER} runbooks compost keys.\n"
QUESTION = "compost runbooks keys"


@pytest.fixture
def pair(home: Path) -> Workspace:
    """``guide`` (public) and ``runbooks`` (confidential, with the marker), both built."""
    make_wiki(home, "guide", {"guide.md": GUIDE}, sensitivity="public")
    make_wiki(home, "runbooks", {"runbooks.md": RUNBOOKS}, sensitivity="confidential")
    ws = Workspace(home, recheck_seconds=0)
    build(ws.wiki("guide"))
    build(ws.wiki("runbooks"))
    return ws


def _builds(ws: Workspace, name: str) -> Path:
    return ws.wiki(name).index_dir / "builds"


def _runbooks_build(ws: Workspace) -> Path:
    wiki = ws.wiki("runbooks")
    return wiki.index_dir / "builds" / store.current_build_id(wiki)


def _write_current(ws: Workspace, value: str) -> None:
    (ws.wiki("guide").index_dir / "CURRENT").write_text(value, encoding="utf-8")


def _rewrite_manifest(folder: Path, **changes: object) -> None:
    """Change fields of a build's manifest and give it a valid checksum again (as a careful attacker would)."""
    path = folder / "manifest.json"
    manifest = json.loads(path.read_text(encoding="utf-8"))
    manifest.update(changes)
    manifest["manifest_sha256"] = store.manifest_digest(manifest)
    path.write_text(json.dumps(manifest), encoding="utf-8")


def _public_search(ws: Workspace, cache: IndexCache | None = None) -> tuple[list, list[str]]:
    """A public search of ``guide``: its passages and every text it shows (passages, warnings, errors)."""
    try:
        result = search(ws, ws.adhoc(["guide"], "public"), QUESTION, clearance="public",
                        cache=cache or IndexCache())
    except IndexMissing as exc:
        return [], [str(exc)]
    texts = [f"{p.wiki} {p.path} {p.heading} {p.text}" for p in result.passages] + result.warnings
    return result.passages, texts + [result.hint or ""]


def _assert_refused(ws: Workspace, expected: str) -> None:
    passages, texts = _public_search(ws)
    assert not passages, texts
    assert all(MARKER not in t and "Rotate the compost vault" not in t for t in texts), texts
    joined = " ".join(texts)
    assert expected in joined and "rebuild it with 'wikirag build guide'" in joined, joined
    with pytest.raises(IndexMissing, match="rebuild it with 'wikirag build guide'") as err:
        store.load(ws.wiki("guide"))
    assert MARKER not in str(err.value)
    state = status(ws.wiki("guide"))
    assert state.state == "incompatible" and "rebuild it with 'wikirag build guide'" in state.detail
    assert MARKER not in state.detail


def _assert_recovers(ws: Workspace) -> None:
    """The next build ignores the tampered index, publishes a good one and leaves ``runbooks`` intact."""
    guide = ws.wiki("guide")
    assert build(guide).state == "built"
    build_id = store.current_build_id(guide)
    assert store.BUILD_ID_RE.fullmatch(build_id)
    assert store.build_folder(guide, build_id).is_dir() and not (guide.index_dir / "builds").is_symlink()
    assert not any(p.is_symlink() for p in (guide.index_dir / "builds").iterdir())
    assert [p.name for p in (guide.index_dir / "builds").iterdir()] == [build_id]  # the tampered one swept
    assert status(guide).state == "fresh"
    passages, texts = _public_search(ws)
    assert passages and {p.path for p in passages} == {"guide.md"}
    assert all(MARKER not in t for t in texts)
    assert MARKER in store.load(ws.wiki("runbooks")).chunks[0].text  # the other wiki's index untouched


def _parent_relative(ws: Workspace) -> str:
    return "../../../runbooks/.index/builds/" + _runbooks_build(ws).name  # from guide/.index/builds/


POINTERS: dict[str, Callable[[Workspace], str]] = {
    "relative path": _parent_relative,
    "relative, one level up": lambda ws: "../runbooks/.index/builds/" + _runbooks_build(ws).name,
    "absolute path": lambda ws: str(_runbooks_build(ws)),
    "id with a slash": lambda ws: store.current_build_id(ws.wiki("guide")) + "/" + _parent_relative(ws),
    "id then ..": lambda ws: _runbooks_build(ws).name + "/..",
    "dot dot": lambda ws: "..",
    "empty": lambda ws: "",
    "whitespace": lambda ws: "  \n\t\n",
    "a plain name": lambda ws: "latest",
    "an id with a newline inside": lambda ws: _runbooks_build(ws).name + "\n../x",
}


@pytest.mark.parametrize("case", sorted(POINTERS))
def test_current_must_be_a_plain_build_id(pair: Workspace, case: str) -> None:
    _write_current(pair, POINTERS[case](pair))
    _assert_refused(pair, "invalid pointer .index/CURRENT")
    _assert_recovers(pair)


def test_the_pointer_is_not_echoed_unless_it_is_a_plain_name(pair: Workspace) -> None:
    _write_current(pair, str(_runbooks_build(pair)))
    _, texts = _public_search(pair)
    assert "runbooks" not in " ".join(texts)  # the other wiki is not even named
    _write_current(pair, "no-such-build")
    with pytest.raises(IndexMissing, match="damaged .*build no-such-build is missing"):
        store.load(pair.wiki("guide"))


def test_a_build_symlinked_into_another_wiki_is_refused(pair: Workspace) -> None:
    fake = "20990101T000000-abcdef"
    (_builds(pair, "guide") / fake).symlink_to(_runbooks_build(pair), target_is_directory=True)
    _write_current(pair, fake)
    _assert_refused(pair, "a link out of .index/builds")
    _assert_recovers(pair)


def test_a_symlinked_builds_folder_is_refused_and_the_build_does_not_write_into_it(pair: Workspace) -> None:
    builds = _builds(pair, "guide")
    shutil.rmtree(builds)
    builds.symlink_to(_builds(pair, "runbooks"), target_is_directory=True)
    _write_current(pair, _runbooks_build(pair).name)
    _assert_refused(pair, "a link out of .index/builds")
    runbooks_builds = sorted(p.name for p in _builds(pair, "runbooks").iterdir())
    _assert_recovers(pair)
    assert sorted(p.name for p in _builds(pair, "runbooks").iterdir()) == runbooks_builds


def test_a_file_of_the_build_linked_to_another_wiki_is_refused(pair: Workspace) -> None:
    """Its own build, with its passages' text replaced by a link to the other wiki's and the checksums redone."""
    wiki = pair.wiki("guide")
    folder = wiki.index_dir / "builds" / store.current_build_id(wiki)
    (folder / "passages/text.bin").unlink()
    (folder / "passages/text.bin").symlink_to(_runbooks_build(pair) / "passages/text.bin")
    checksums = json.loads((folder / "manifest.json").read_text())["checksums"]
    checksums["passages/text.bin"] = store.sha256((folder / "passages/text.bin").read_bytes())
    _rewrite_manifest(folder, checksums=checksums)
    passages, texts = _public_search(pair)
    assert not passages and all(MARKER not in t for t in texts)
    assert "passages/text.bin leads out of its build" in " ".join(texts)
    _assert_recovers(pair)


def test_a_copied_build_of_another_wiki_is_refused(pair: Workspace) -> None:
    source = _runbooks_build(pair)
    shutil.copytree(source, _builds(pair, "guide") / source.name)
    _write_current(pair, source.name)
    _assert_refused(pair, "damaged or foreign (its build was made for another wiki)")
    _, texts = _public_search(pair)
    assert "runbooks" not in " ".join(texts)
    _assert_recovers(pair)


def test_a_copied_build_renamed_to_this_wiki_is_refused_by_its_level(pair: Workspace) -> None:
    source = _runbooks_build(pair)
    copy = _builds(pair, "guide") / source.name
    shutil.copytree(source, copy)
    _rewrite_manifest(copy, wiki="guide")
    _write_current(pair, source.name)
    _assert_refused(pair, "was indexed as confidential, above the wiki's level public now")
    _assert_recovers(pair)


@pytest.mark.parametrize("level", ["internal", "confidential", "restricted", "secret", None])
def test_a_build_recording_a_level_above_the_wikis_is_refused(pair: Workspace, level: str | None) -> None:
    wiki = pair.wiki("guide")
    folder = wiki.index_dir / "builds" / store.current_build_id(wiki)
    _rewrite_manifest(folder, sensitivity=level)
    expected = f"indexed as {level}, above the wiki's level public now" if level in (
        "internal", "confidential", "restricted") else "its manifest records no valid level"
    _assert_refused(pair, expected)
    _assert_recovers(pair)


def test_a_lowered_level_stops_a_cached_build_at_once(pair: Workspace, home: Path) -> None:
    """runbooks was indexed as confidential; its level is lowered to public: its build no longer serves,
    not even from a warm cache (CURRENT did not change), until it is rebuilt at the new level."""
    cache = IndexCache(recheck_seconds=3600)
    comp = pair.adhoc(["runbooks"], "confidential")
    assert search(pair, comp, "keys", clearance="confidential", cache=cache).passages
    manifest = home / "wikis" / "runbooks" / ".wiki.yaml"
    manifest.write_text(manifest.read_text().replace("confidential", "public"))
    ws = Workspace(home, recheck_seconds=0)
    with pytest.raises(IndexMissing) as err:
        search(ws, ws.adhoc(["runbooks"], "public"), "keys", clearance="public", cache=cache)
    assert MARKER not in str(err.value)
    assert "indexed as confidential, above the wiki's level public now: rebuild it" in str(err.value)
    assert status(ws.wiki("runbooks")).state == "incompatible"
    assert build(ws.wiki("runbooks")).state == "built"  # not "up to date": the sources alone did not change
    result = search(ws, ws.adhoc(["runbooks"], "public"), "keys", clearance="public", cache=cache)
    assert result.passages and not result.warnings  # rebuilt at the new level: served (the owner chose to)


def test_a_raised_level_keeps_serving_with_the_warning_and_a_build_records_it(pair: Workspace, home: Path) -> None:
    manifest = home / "wikis" / "guide" / ".wiki.yaml"
    manifest.write_text(manifest.read_text().replace("public", "internal"))
    ws = Workspace(home, recheck_seconds=0)
    with pytest.raises(WikiragError):  # above a public caller now
        search(ws, ws.adhoc(["guide"], "public"), QUESTION, clearance="public")
    result = search(ws, ws.adhoc(["guide"], "internal"), QUESTION, clearance="internal")
    assert result.passages
    assert any("changed level since it was indexed (public → internal)" in w for w in result.warnings)
    state = status(ws.wiki("guide"))
    assert state.state == "fresh" and state.level_changed == "public → internal"
    assert build(ws.wiki("guide")).state == "built"  # records the new level
    result = search(ws, ws.adhoc(["guide"], "internal"), QUESTION, clearance="internal")
    assert result.passages and not result.warnings


def test_list_and_check_show_a_tampered_index_as_incompatible(pair: Workspace, home: Path) -> None:
    _write_current(pair, _parent_relative(pair))
    runner = CliRunner()
    listed = runner.invoke(cli, ["--home", str(home), "list", "--json", "--clearance", "public"])
    assert listed.exit_code == 0, listed.output
    guide = next(w for w in json.loads(listed.stdout)["wikis"] if w["name"] == "guide")
    assert guide["status"] == "incompatible" and "invalid pointer" in guide["detail"]
    checked = runner.invoke(cli, ["--home", str(home), "check"])
    assert "wiki 'guide' index is incompatible" in checked.stderr
    for out in (listed.stdout, listed.stderr, checked.stdout, checked.stderr):
        assert MARKER not in out
    built = runner.invoke(cli, ["--home", str(home), "build", "guide"])
    assert built.exit_code == 0, built.output
    assert status(pair.wiki("guide")).state == "fresh"
