"""``wikirag watch`` (issue 21, item 2): real watcher processes on a real workspace — an edit is rebuilt on
its own, a bad manifest or composition is reported and nothing is rebuilt from it, two watchers on one
workspace corrupt nothing."""

from __future__ import annotations

import queue
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


class WatchProcess:
    def __init__(self, home: Path, *names: str):
        self.proc = subprocess.Popen([sys.executable, "-m", "wikirag", "--home", str(home), "watch", "--debounce",
                                      "150", *names], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._read, args=(self.proc.stdout,), daemon=True).start()
        self.started = self.proc.stderr.readline()
        assert "watching" in self.started, self.started + self.proc.stderr.read()
        time.sleep(0.7)  # the watches are set up as run() starts

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
        raise AssertionError(f"no line with {text!r} in {timeout} s; seen: {self.seen}")

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
        result = search(garden, "roses", "deadhead summer", clearance="public", audit_event=None)
        assert result.passages[0].path == "roses.md" and "Deadhead" in result.passages[0].text
        assert time.monotonic() - started < 10
        # the build's own writes (.index/) never trigger another build
        time.sleep(1.0)
        assert watcher.lines.empty(), list(watcher.lines.queue)
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
