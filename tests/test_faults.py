"""Faults that must lose nothing: killed builds, damaged index files, a full disk, rebuilds under load."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from wikirag import BuildError, IndexMissing, Workspace, build, checked, store, views
from wikirag import index as index_mod
from wikirag.cache import IndexCache
from wikirag.retrieval import search

from .conftest import make_wiki

REPO = Path(__file__).resolve().parent.parent
ROUNDS = int(os.environ.get("WIKIRAG_FAULT_ROUNDS", "12"))  # bench/fault_loop.py runs hundreds


def test_sigkill_at_random_moments_never_breaks_the_index() -> None:
    result = subprocess.run([sys.executable, str(REPO / "bench" / "fault_loop.py"), "--rounds", str(ROUNDS),
                             "--pages", "200", "--json"], check=False, capture_output=True, text=True, timeout=600)
    report = json.loads(result.stdout)
    assert report["failed_loads"] == 0, report["errors"]
    assert report["killed_mid_build"] >= 1
    assert report["final_build"] in ("built", "up to date") and report["debris_after_final_build"] == []
    print(f"\nSIGKILL loop: {report}")


@pytest.fixture
def two_wikis(home: Path) -> Workspace:
    make_wiki(home, "vectors", {"a.md": "# Tyres\n\nCheck tyre pressure monthly when the tyres are cold.\n",
                                "b.md": "# Oil\n\nChange the engine oil every ten thousand kilometres.\n"},
              extra="layers:\n  dense: {}\n")
    ws = Workspace(home, recheck_seconds=0)
    build(ws.wiki("alpha"))
    build(ws.wiki("vectors"))
    return ws


def _damage(path: Path, how: str) -> None:
    data = path.read_bytes()
    if how == "truncate":
        path.write_bytes(data[: len(data) // 2])
    else:
        middle = len(data) // 2
        path.write_bytes(data[:middle] + bytes([data[middle] ^ 0x5A]) + data[middle + 1:])


@pytest.mark.parametrize("how", ["truncate", "flip"])
def test_every_damaged_index_file_is_detected(two_wikis: Workspace, how: str) -> None:
    tried = 0
    for name in ("alpha", "vectors"):
        wiki = two_wikis.wiki(name)
        folder = wiki.index_dir / "builds" / store.current_build_id(wiki)
        files = sorted(p for p in folder.rglob("*") if p.is_file())
        # every file of the build is checksummed in its manifest, and the manifest checksums itself; the
        # build's stamp (checked.STAMP: which files were hashed, as they were then) only spares hashing
        checksummed = set(json.loads((folder / "manifest.json").read_text())["checksums"])
        assert {p.relative_to(folder).as_posix() for p in files} == checksummed | {"manifest.json", checked.STAMP}
        assert any(p.name == "vectors.npy" for p in files) == (name == "vectors")
        backup = folder.with_name("backup")
        shutil.copytree(folder, backup)
        for path in files:
            _damage(path, how)
            damaged = f"damaged.*rebuild it with 'wikirag build {name}'"
            rel = path.relative_to(folder).as_posix()
            if rel == checked.STAMP:  # a damaged stamp vouches for nothing: the files are hashed, and serve
                assert len(store.load(wiki, with_bm25=True).bm25.tf) > 0
            elif rel == "graph.json":  # read (and checked) when a query first follows links
                with pytest.raises(IndexMissing, match=damaged):
                    store.load(wiki).graph  # noqa: B018
            elif rel.startswith("bm25/") and rel not in store.NOT_READ_BY_QUERIES:
                # read (and checked) when first used: not at all by a composition with a saved merged view
                with pytest.raises(IndexMissing, match=damaged):
                    store.load(wiki).bm25.tf  # noqa: B018 - the term frequencies are read when first merged
                # a query of it with another wiki (merged anew) leaves it out, saying why
                views.flush()
                shutil.rmtree(two_wikis.home / ".index" / "views", ignore_errors=True)
                both = two_wikis.adhoc(["alpha", "vectors"], "public")
                result = search(two_wikis, both, "compost oil", clearance="public", cache=IndexCache(), audit_event=None)
                assert {p.wiki for p in result.passages} == {"alpha", "vectors"} - {name}
                assert any(re.search(damaged, w) for w in result.warnings), result.warnings
            elif rel in store.NOT_READ_BY_QUERIES:  # read only by the next build, which checks them first
                assert store.load(wiki).chunks
                with pytest.raises(IndexMissing, match=damaged):
                    store.verify(wiki, folder, json.loads((folder / "manifest.json").read_text()))
                assert index_mod._previous(wiki).manifest is None  # so nothing of the build is reused
            else:
                with pytest.raises(IndexMissing, match=damaged):
                    store.load(wiki)
            tried += 1
            shutil.rmtree(folder)
            shutil.copytree(backup, folder)
        shutil.rmtree(backup)
        assert store.load(wiki).chunks  # restored: loads again
    assert tried >= 2 * 10  # manifest, passages, links and the bm25 files of each wiki, at least


def test_a_damaged_index_is_never_served_and_the_next_build_recovers(two_wikis: Workspace, home: Path) -> None:
    wiki = two_wikis.wiki("alpha")
    folder = wiki.index_dir / "builds" / store.current_build_id(wiki)
    _damage(folder / "passages" / "text.bin", "flip")
    with pytest.raises(IndexMissing, match="damaged"):
        search(two_wikis, "open", "compost", clearance="public")
    (wiki.index_dir / "CURRENT").write_text("no-such-build\n")
    with pytest.raises(IndexMissing, match="damaged .*build no-such-build is missing"):
        store.load(wiki)
    assert build(wiki).state == "built"
    assert search(two_wikis, "open", "compost", clearance="public").passages


def _mount_tmpfs(folder: Path, size: str) -> bool:
    folder.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        return False
    return subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
                          check=False, capture_output=True).returncode == 0


def test_a_full_disk_fails_the_build_clearly_and_keeps_the_old_index(tmp_path: Path) -> None:
    sources = tmp_path / "sources"
    sources.mkdir()
    (sources / "small.md").write_text("# Small\n\nA small page that fits on any disk, about compost.\n")
    disk = tmp_path / "disk"
    if not _mount_tmpfs(disk, "512k"):
        pytest.skip("needs root to mount a small tmpfs (CI runs as root)")
    try:
        home = disk / "ws"
        make_wiki(home, "tight", {}, extra=f"source: {sources}\n")
        ws = Workspace(home, recheck_seconds=0)
        build(ws.wiki("tight"))
        before = store.load(ws.wiki("tight")).build_id
        words = " ".join(f"word{i}" for i in range(40_000))  # ~300 kB of distinct terms: the index outgrows 512 kB
        (sources / "big.md").write_text(f"# Big\n\n{words}\n")
        with pytest.raises(BuildError, match=r"could not write the index of wiki 'tight' \(No space left on device.*"
                                             r"the previous index still serves"):
            build(ws.wiki("tight"))
        loaded = store.load(ws.wiki("tight"))
        assert loaded.build_id == before and loaded.chunks
        assert not list(ws.wiki("tight").index_dir.glob("tmp-*"))
    finally:
        # the loaded index's memory maps keep the small disk busy until collected: detach it lazily then,
        # or the mount outlives the test run
        if subprocess.run(["umount", str(disk)], check=False, capture_output=True).returncode:
            subprocess.run(["umount", "-l", str(disk)], check=False, capture_output=True)


def test_queries_from_eight_threads_while_rebuilds_swap_the_index(home: Path) -> None:
    pages = {f"p{i}.md": f"# Page {i}\n\nVersion A text of page {i} about compost and keys.\n" for i in range(30)}
    make_wiki(home, "swap", pages)
    (home / "rags" / "swap.yaml").write_text("sensitivity: public\nwikis: [swap]\nk: 10\n")
    ws = Workspace(home, recheck_seconds=0)
    build(ws.wiki("swap"))
    stop = threading.Event()
    counts = {"A": 0, "B": 0, "mixed": 0, "errors": 0, "queries": 0}
    lock = threading.Lock()

    def query() -> None:
        while not stop.is_set():
            try:
                versions = {p.text.split("Version ")[1][0]
                            for p in search(ws, "swap", "compost keys", clearance="public").passages}
                key = versions.pop() if len(versions) == 1 else "mixed"
            except Exception:  # noqa: BLE001 - any exception is a failure of the swap
                key = "errors"
            with lock:
                counts[key] += 1
                counts["queries"] += 1

    threads = [threading.Thread(target=query) for _ in range(8)]
    for t in threads:
        t.start()
    for cycle in range(6):
        version = "B" if cycle % 2 == 0 else "A"
        for name in pages:
            path = home / "wikis" / "swap" / name
            path.write_text(path.read_text().replace("Version A" if version == "B" else "Version B",
                                                     f"Version {version}"))
        build(ws.wiki("swap"))
    stop.set()
    for t in threads:
        t.join()
    print(f"\nqueries during 6 rebuilds: {counts}")
    assert counts["errors"] == 0 and counts["mixed"] == 0
    assert counts["A"] > 0 and counts["B"] > 0


def test_a_stamp_spares_hashing_but_never_vouches_for_a_changed_file(two_wikis: Workspace) -> None:
    """The build stamps its files (checked.STAMP), so a process maps them without hashing; a file changed
    afterwards, even to the same size with its mtime set back, has a new ctime and is hashed: refused."""
    wiki = two_wikis.wiki("alpha")
    folder = wiki.index_dir / "builds" / store.current_build_id(wiki)
    stamps = json.loads((folder / checked.STAMP).read_text())
    manifest = json.loads((folder / "manifest.json").read_text())
    assert set(stamps) == set(manifest["checksums"])  # every file, with the digest the manifest records
    assert all(stamps[n][0] == manifest["checksums"][n] for n in stamps)
    text = folder / "passages" / "text.bin"
    before = os.stat(text)
    data = bytearray(text.read_bytes())
    data[len(data) // 2] ^= 0x20
    text.write_bytes(bytes(data))
    os.utime(text, ns=(before.st_atime_ns, before.st_mtime_ns))  # same size, same mtime: only ctime moved
    assert os.stat(text).st_size == before.st_size and os.stat(text).st_ctime_ns != before.st_ctime_ns
    with pytest.raises(IndexMissing, match="passages/text.bin does not match its checksum"):
        store.load(wiki)
