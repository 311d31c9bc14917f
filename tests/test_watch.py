"""``wikirag watch`` (issue 21, items 2 and 4): real watcher processes on a real workspace — an edit is
rebuilt on its own, a bad manifest or composition is reported and nothing is rebuilt from it, two watchers
on one workspace corrupt nothing, sources renamed, emptied or made unreadable under the watcher keep the
previous index serving, wiki folders renamed or added are reported and built.

"Unreadable" needs a watcher that permissions apply to: CI runs as root, so there the watcher runs
without the capabilities that let root read anything (``setpriv``, util-linux)."""

from __future__ import annotations

import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from wikirag import Workspace, build, store
from wikirag.retrieval import search

from .conftest import make_wiki

# root without the capabilities that bypass file permissions (empty when not root: permissions apply anyway)
UNPRIVILEGED = (["setpriv", "--inh-caps=-all", "--bounding-set=-dac_override,-dac_read_search"]
                if os.geteuid() == 0 else [])


class WatchProcess:
    def __init__(self, home: Path, *names: str, prefix: list[str] = ()):
        self.proc = subprocess.Popen([*prefix, sys.executable, "-m", "wikirag", "--home", str(home), "watch",
                                      "--debounce", "150", *names], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True)
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._read, args=(self.proc.stdout,), daemon=True).start()
        self.started = self.proc.stderr.readline()
        assert "watching" in self.started, self.started + self.proc.stderr.read()
        self.wait_for("watching: ")  # the watches are up and the catch-up is done
        self.seen_at_start, self.seen = self.seen, []

    def _read(self, stream) -> None:
        for line in stream:
            self.lines.put(line.rstrip("\n"))

    def wait_for(self, text: str, timeout: float = 20.0) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=0.1)
            except queue.Empty:
                continue
            self.seen.append(line)
            if text in line:
                return line
        ended = "" if self.proc.poll() is None else f"; the watcher ended: {self.proc.stderr.read()}"
        raise AssertionError(f"no line with {text!r} in {timeout} s; seen: {self.seen}{ended}")

    def stop(self) -> str:
        self.proc.send_signal(signal.SIGINT)
        try:
            _, err = self.proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise AssertionError("Ctrl-C (SIGINT) did not stop the watcher") from None
        return err


@pytest.fixture
def garden(home: Path) -> Workspace:
    make_wiki(home, "roses", {"roses.md": "# Roses\n\nPrune roses in early spring, above an outward bud.\n",
                              "lawns.md": "# Lawns\n\nMow lawns weekly in summer, never too short.\n"})
    (home / "rags" / "roses.yaml").write_text("sensitivity: public\nwikis: [roses]\n")
    ws = Workspace(home, recheck_seconds=0)
    build(ws.wiki("roses"))
    return ws


def test_an_edit_is_rebuilt_and_searchable_on_its_own(garden: Workspace) -> None:
    watcher = WatchProcess(garden.home, "roses")
    try:
        started = time.monotonic()
        (garden.home / "wikis/roses/roses.md").write_text("# Roses\n\nDeadhead roses through the summer months.\n")
        line = watcher.wait_for("roses: built")
        assert "1 file(s) changed" in line
        # the watcher said which page changed: an update, the page alone written (wikirag.delta)
        assert store.load(garden.wiki("roses")).manifest["delta"]["pages"] == 1
        result = search(garden, "roses", "deadhead summer", clearance="public", audit_event=None)
        assert result.passages[0].path == "roses.md" and "Deadhead" in result.passages[0].text
        assert time.monotonic() - started < 10
        # the build's own writes (.index/) never trigger another build
        time.sleep(1.0)
        assert watcher.lines.empty(), list(watcher.lines.queue)
    finally:
        err = watcher.stop()
    assert "Traceback" not in err, err


def test_a_workspace_and_source_under_a_hidden_folder_are_watched(home: Path, tmp_path: Path) -> None:
    # hidden parts of the path above the watched folders (~/.cache/..., ~/.local/share/...) do not count;
    # hidden parts below them (an editor's swap file, .git/) do
    hidden = tmp_path / ".cache" / "ws"
    shutil.move(home, hidden)
    docs = tmp_path / ".local" / "docs"
    docs.mkdir(parents=True)
    (docs / "roses.md").write_text("# Roses\n\nPrune roses in early spring, above an outward bud.\n")
    make_wiki(hidden, "roses", {"lawns.md": "# Lawns\n\nMow lawns weekly in summer, never too short.\n"})
    make_wiki(hidden, "docs", {}, extra=f"source: {docs}\n")
    (hidden / "rags" / "roses.yaml").write_text("sensitivity: public\nwikis: [roses, docs]\n")
    ws = Workspace(hidden, recheck_seconds=0)
    build(ws.wiki("roses"))
    build(ws.wiki("docs"))
    watcher = WatchProcess(hidden, "roses", "docs")
    try:
        (hidden / "wikis/roses/lawns.md").write_text("# Lawns\n\nScarify lawns in autumn and rake out the moss.\n")
        assert "1 file(s) changed" in watcher.wait_for("roses: built")
        (docs / "roses.md").write_text("# Roses\n\nDeadhead roses through the summer months.\n")
        assert "1 file(s) changed" in watcher.wait_for("docs: built")
        assert {p.path for p in _hits(ws, "scarify deadhead")} == {"lawns.md", "roses.md"}
        (docs / ".roses.md.swp").write_text("swap")
        (docs / ".git").mkdir()
        (docs / ".git" / "HEAD.md").write_text("ref")
        time.sleep(1.0)
        assert watcher.lines.empty(), list(watcher.lines.queue)
    finally:
        err = watcher.stop()
    assert "Traceback" not in err, err


def test_an_updated_wiki_left_alone_is_compacted_in_the_background(garden: Workspace,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Edits are updates (a delta beside the last full build); once the wiki is left alone for
    WIKIRAG_COMPACT_SECONDS, a full build in a background process writes one base again, quietly. An
    edit while it runs waits for it, then is an update of the new base."""
    monkeypatch.setenv("WIKIRAG_COMPACT_SECONDS", "1")
    wiki = garden.wiki("roses")
    watcher = WatchProcess(garden.home, "roses")
    try:
        (garden.home / "wikis/roses/roses.md").write_text("# Roses\n\nDeadhead roses through the summer months.\n")
        watcher.wait_for("roses: built")
        assert store.load(wiki).delta is not None
        deadline = time.monotonic() + 20
        while store.load(wiki).delta is not None:
            assert time.monotonic() < deadline, "not compacted in 20 s"
            time.sleep(0.2)
        result = search(garden, "roses", "deadhead summer", clearance="public", audit_event=None)
        assert "Deadhead" in result.passages[0].text
        (garden.home / "wikis/roses/lawns.md").write_text("# Lawns\n\nMow lawns fortnightly in a dry summer.\n")
        watcher.wait_for("roses: built")
        assert store.load(wiki).manifest["delta"]["pages"] == 1
        time.sleep(0.5)
        assert watcher.lines.empty(), list(watcher.lines.queue)  # the compaction said nothing
    finally:
        err = watcher.stop()
    assert "Traceback" not in err, err


def test_a_bad_manifest_or_composition_is_reported_and_nothing_is_rebuilt(garden: Workspace) -> None:
    wiki = garden.wiki("roses")
    serving = store.current_build_id(wiki)
    manifest = garden.home / "wikis/roses/.wiki.yaml"
    good = manifest.read_text()
    watcher = WatchProcess(garden.home)
    try:
        manifest.write_text(good + "sensitivty: internal\n")  # a typo'd key
        line = watcher.wait_for("roses:")
        assert "sensitivty" in line and "previous index keeps serving" in line
        assert store.current_build_id(wiki) == serving
        (garden.home / "rags/roses.yaml").write_text("sensitivity: public\nwikis: [roses, nosuch]\n")
        line = watcher.wait_for("unknown wiki 'nosuch'")
        assert "roses.yaml:2" in line
        manifest.write_text(good.replace("title:", "title: Roses and more #"))  # fixed (a new title)
        watcher.wait_for("roses: ")
    finally:
        err = watcher.stop()
    assert "Traceback" not in err, err


def test_two_watchers_on_one_workspace_corrupt_nothing(garden: Workspace) -> None:
    first, second = WatchProcess(garden.home), WatchProcess(garden.home)
    try:
        for i in range(3):
            (garden.home / f"wikis/roses/extra{i}.md").write_text(f"# Extra {i}\n\nClimbing roses number {i} "
                                                                  f"need tying in every autumn.\n")
            time.sleep(0.4)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            result = search(garden, "roses", "climbing tying autumn", clearance="public", audit_event=None)
            if len({p.path for p in result.passages}) == 3 and not result.warnings:
                break
            time.sleep(0.3)
        assert {p.path for p in result.passages} == {"extra0.md", "extra1.md", "extra2.md"}, result.warnings
        assert store.load(garden.wiki("roses")).chunks  # the serving build loads, every checksum right
    finally:
        errs = [first.stop(), second.stop()]
    assert all("Traceback" not in e for e in errs), errs


def test_the_watcher_first_catches_up_with_edits_made_while_nobody_watched(garden: Workspace) -> None:
    (garden.home / "wikis/roses/lawns.md").write_text("# Lawns\n\nScarify lawns in autumn, then overseed.\n")
    watcher = WatchProcess(garden.home)
    try:
        assert "1 file(s) changed" in next(line for line in watcher.seen_at_start if "roses: built" in line)
        assert "Scarify" in search(garden, "roses", "scarify", clearance="public", audit_event=None).passages[0].text
    finally:
        err = watcher.stop()
    assert "Traceback" not in err, err


def _hits(ws: Workspace, query: str) -> list:
    return search(ws, "roses", query, clearance="public", audit_event=None).passages


@pytest.mark.skipif(os.geteuid() == 0 and shutil.which("setpriv") is None, reason="root without setpriv")
def test_a_source_folder_renamed_emptied_or_unreadable_keeps_the_previous_index(home: Path, tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    pages = {"roses.md": "# Roses\n\nPrune roses in early spring, above an outward bud.\n",
             "lawns.md": "# Lawns\n\nMow lawns weekly in summer, never too short.\n"}
    for name, text in pages.items():
        (docs / name).write_text(text)
    make_wiki(home, "roses", {}, extra=f"source: {docs}\n")
    (home / "rags" / "roses.yaml").write_text("sensitivity: public\nwikis: [roses]\n")
    ws = Workspace(home, recheck_seconds=0)
    build(ws.wiki("roses"))
    serving = store.current_build_id(ws.wiki("roses"))
    watcher = WatchProcess(home, "roses", prefix=UNPRIVILEGED)
    try:
        # renamed: the build says why, the previous index serves (its passages marked changed: file gone)
        docs.rename(tmp_path / "docs-moved")
        line = watcher.wait_for("roses: ")
        assert f"source folder {docs} does not exist" in line and "previous index" in line, line
        assert store.current_build_id(ws.wiki("roses")) == serving
        assert [p.state for p in _hits(ws, "prune roses")][:1] == ["changed"]
        (tmp_path / "docs-moved").rename(docs)  # back: noticed without any event inside it
        assert "up to date" in watcher.wait_for("roses: ")
        assert [p.state for p in _hits(ws, "prune roses")][:1] == ["current"]

        # emptied: nothing to index is an error, not an empty index
        for name in pages:
            (docs / name).unlink()
        line = watcher.wait_for("roses: ")
        assert "has nothing to index" in line and "previous index" in line, line
        assert store.current_build_id(ws.wiki("roses")) == serving
        for name, text in pages.items():
            (docs / name).write_text(text)
        assert "roses: up to date" in watcher.wait_for("roses: ")  # the same pages: the same index
        assert store.current_build_id(ws.wiki("roses")) == serving

        # unreadable: a read error is not a deletion, the pages' passages are kept and a warning says so
        (docs / "lawns.md").write_text("# Lawns\n\nMow lawns weekly in summer, never too short; edge them too.\n")
        watcher.wait_for("roses: built")
        serving = store.current_build_id(ws.wiki("roses"))
        docs.chmod(0)
        try:
            (docs / "roses.md").touch()  # an event (root's own) while the folder cannot be read by the watcher
            line = watcher.wait_for("roses: 2 page(s) cannot be read now")
            assert "Permission denied" in line and "keep serving" in line, line
            assert store.current_build_id(ws.wiki("roses")) == serving
            assert {p.path for p in _hits(ws, "roses lawns")} == {"roses.md", "lawns.md"}
        finally:
            docs.chmod(0o755)
        (docs / "roses.md").write_text("# Roses\n\nPrune roses in late winter instead.\n")
        watcher.wait_for("roses: built")
        assert "late winter" in _hits(ws, "prune roses")[0].text
        assert store.load(ws.wiki("roses")).chunks  # every checksum right
    finally:
        err = watcher.stop()
    assert "Traceback" not in err, err


def test_a_wiki_folder_renamed_is_reported_and_a_new_one_built(garden: Workspace) -> None:
    watcher = WatchProcess(garden.home)
    try:
        (garden.home / "wikis/roses").rename(garden.home / "wikis/roses-old")
        assert "is gone (renamed or removed)" in watcher.wait_for("roses: wiki folder")
        line = watcher.wait_for("roses-old: ")
        assert "name 'roses' differs from its folder 'roses-old'" in line, line
        make_wiki(garden.home, "tulips", {"tulips.md": "# Tulips\n\nPlant tulip bulbs in November, deep.\n"})
        assert "1 file(s) changed" in watcher.wait_for("tulips: built")
        (garden.home / "wikis/roses-old").rename(garden.home / "wikis/roses")
        watcher.wait_for("roses: up to date")
        assert _hits(garden, "prune")[0].path == "roses.md"
    finally:
        err = watcher.stop()
    assert "Traceback" not in err, err


@pytest.mark.skipif(os.geteuid() == 0 and shutil.which("setpriv") is None, reason="root without setpriv")
def test_a_page_that_cannot_be_read_keeps_its_passages(garden: Workspace) -> None:
    """``wikirag build`` by a process that may not read one page: the page's previous passages stay."""
    page = garden.home / "wikis/roses/lawns.md"
    (garden.home / "wikis/roses/roses.md").write_text("# Roses\n\nDeadhead roses through the summer months.\n")
    page.write_text("# Lawns\n\nMow lawns weekly in summer, and feed them in spring.\n")  # changed: to be read
    page.chmod(0)
    try:
        out = subprocess.run([*UNPRIVILEGED, sys.executable, "-m", "wikirag", "--home", str(garden.home), "build",
                              "roses"], check=False, capture_output=True, text=True, timeout=60)
    finally:
        page.chmod(0o644)
    assert out.returncode == 0, out.stderr
    assert "lawns.md: cannot read: Permission denied: its passages of the previous build are kept" in out.stdout + out.stderr
    hits = {p.path: p for p in _hits(garden, "mow lawns deadhead")}
    assert set(hits) == {"lawns.md", "roses.md"} and "Deadhead" in hits["roses.md"].text
    assert "never too short" in hits["lawns.md"].text and hits["lawns.md"].state == "changed"  # the kept text


def test_unchanged_is_the_cheap_check_of_the_catch_up(garden: Workspace) -> None:
    from wikirag.index import unchanged

    wiki = garden.wiki("roses")
    assert unchanged(wiki)
    (garden.home / "wikis/roses/new.md").write_text("# New\n\nA new page about climbing roses on walls.\n")
    assert not unchanged(wiki)  # a page added
    build(wiki)
    assert unchanged(wiki)
    (garden.home / "wikis/roses/lawns.md").write_text("# Lawns\n\nMow lawns weekly, longer in dry spells.\n")
    assert not unchanged(wiki)  # a page edited
    build(wiki)
    manifest = garden.home / "wikis/roses/.wiki.yaml"
    manifest.write_text(manifest.read_text().replace("public", "internal"))
    assert not unchanged(garden.wiki("roses"))  # the level changed
    assert not unchanged(garden.wiki("alpha"))  # never built
