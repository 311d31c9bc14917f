"""The bad-input corpus (tests/fixtures/bad-input/, plus large inputs made here): each input gets a
specific error or is handled, and the table says which."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from wikirag import CompositionError, ManifestError, Workspace, build, search, store

from .conftest import make_wiki

CORPUS = Path(__file__).parent / "fixtures" / "bad-input"


@pytest.mark.parametrize(("manifest", "expected"), [
    ("malformed-manifest.yaml", r"\.wiki\.yaml:3: invalid YAML: expected .,. or .\]., but got .:."),
    ("wrong-types-manifest.yaml", r"key 'title': Input should be a valid string"),
    ("unknown-key-manifest.yaml", r":4: unknown key 'sensitvity': remove it \(did you mean 'sensitivity'\?\)"),
])
def test_bad_manifests_get_specific_errors(home: Path, manifest: str, expected: str) -> None:
    folder = home / "wikis" / "broken"
    folder.mkdir()
    shutil.copy(CORPUS / manifest, folder / ".wiki.yaml")
    with pytest.raises(ManifestError, match=expected):
        Workspace(home).wiki("broken")


def test_a_composition_indented_with_tabs(home: Path) -> None:
    shutil.copy(CORPUS / "tabs-in-composition.yaml", home / "rags" / "tabs.yaml")
    with pytest.raises(CompositionError, match=r"tabs\.yaml:3: invalid YAML"):
        Workspace(home).composition("tabs")


def test_two_folders_claiming_one_wiki_name(home: Path) -> None:
    make_wiki(home, "copy", {"a.md": "# A\n\nA page in a folder that claims to be alpha.\n"})
    manifest = home / "wikis" / "copy" / ".wiki.yaml"
    manifest.write_text(manifest.read_text().replace("name: copy", "name: alpha"))
    with pytest.raises(ManifestError, match="name 'alpha' differs from its folder 'copy'"):
        Workspace(home).wiki("copy")


# what a build makes of each corpus page: indexed (with exact offsets) or skipped with this reason
PAGES = {
    "crlf-bom.md": None,
    "emoji-cjk.md": None,
    "binary.md": "binary file",
    "latin1.md": "not UTF-8",
    "empty.md": "no passage",
    "only-frontmatter.md": "no passage",
}


def test_each_corpus_page_is_indexed_exactly_or_skipped_with_a_reason(home: Path) -> None:
    folder = make_wiki(home, "corpus", {})
    for name in PAGES:
        shutil.copy(CORPUS / name, folder / name)
    (folder / "loop").symlink_to(folder, target_is_directory=True)  # a cycle
    report = build(Workspace(home).wiki("corpus"))
    reasons = {s.path: s.reason for s in report.skipped}
    assert reasons.pop("loop").startswith("symlinked folder")
    for name, expected in PAGES.items():
        if expected is None:
            assert name not in reasons
        else:
            assert reasons[name].startswith(expected), (name, reasons.get(name))
    loaded = store.load(Workspace(home).wiki("corpus"))
    assert {c.path for c in loaded.chunks} == {"crlf-bom.md", "emoji-cjk.md"}
    for c in loaded.chunks:
        assert (folder / c.path).read_bytes().decode("utf-8")[c.start:c.end] == c.text


def test_very_long_lines_are_cut_into_bounded_passages(home: Path) -> None:
    line = " ".join(f"token{i}" for i in range(300_000))  # one 2.3 MB line
    folder = make_wiki(home, "long", {"line.md": f"# One line\n\n{line}\n"})
    build(Workspace(home).wiki("long"))
    chunks = store.load(Workspace(home).wiki("long")).chunks
    text = (folder / "line.md").read_text(encoding="utf-8")
    assert len(chunks) > 100 and all(len(c.text) < 5000 for c in chunks)
    assert all(text[c.start:c.end] == c.text for c in chunks)


MEMORY_PROBE = textwrap.dedent("""
    import json, sys, time
    from wikirag import Workspace, build
    started = time.perf_counter()
    report = build(Workspace(sys.argv[1]).wiki(sys.argv[2]))
    peak = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM"))
    print(json.dumps({"peak_mb": peak / 1024, "seconds": time.perf_counter() - started, "files": report.files,
                      "chunks": report.chunks, "skipped": [[s.path, s.reason] for s in report.skipped]}))
""")


def _probe(home: Path, wiki: str) -> dict:
    out = subprocess.run([sys.executable, "-c", MEMORY_PROBE, str(home), wiki], capture_output=True, text=True,
                         check=True, timeout=600)
    return json.loads(out.stdout)


def test_a_50_mb_page_is_skipped_with_bounded_memory_and_a_5_mb_one_is_indexed(home: Path) -> None:
    paragraph = "Compost heaps need air, water and a balance of green and brown material. " * 20 + "\n\n"
    make_wiki(home, "huge", {"small.md": "# Small\n\nA normal page next to a huge one, about compost.\n"})
    with (home / "wikis" / "huge" / "huge.md").open("w") as fh:
        fh.write("# Huge\n\n")
        while fh.tell() < 50 * 2**20:
            fh.write(paragraph)
    skipped = _probe(home, "huge")
    assert skipped["skipped"] == [["huge.md", "too large (50.0 MB > 10 MB): split it, or raise chunking.max_file_mb"]]
    assert skipped["peak_mb"] < 400, skipped
    make_wiki(home, "big", {})
    with (home / "wikis" / "big" / "big.md").open("w") as fh:
        for i in range(5 * 2**20 // len(paragraph)):
            fh.write(f"## Section {i}\n\n" if i % 50 == 0 else paragraph)
    indexed = _probe(home, "big")
    assert indexed["files"] == 1 and indexed["chunks"] > 1000
    assert indexed["peak_mb"] < 1500, indexed
    print(f"\n50 MB page: skipped, peak {skipped['peak_mb']:.0f} MB; 5 MB page: {indexed['chunks']} chunks "
          f"in {indexed['seconds']:.1f} s, peak {indexed['peak_mb']:.0f} MB")


def test_a_composition_of_200_wikis(home: Path) -> None:
    names = [f"w{i:03d}" for i in range(200)]
    ws = Workspace(home, recheck_seconds=0)
    for i, name in enumerate(names):
        make_wiki(home, name, {"page.md": f"# Page {i}\n\nNotes number {i} about compost, keys and deploys.\n"})
        build(ws.wiki(name))
    (home / "rags" / "many.yaml").write_text("sensitivity: public\nwikis: [" + ", ".join(names) + "]\nk: 10\n")
    result = search(ws, "many", "notes number 150 compost", clearance="public")
    assert result.passages[0].wiki == "w150" and len(result.passages) == 10
    assert result.wikis == names and not result.warnings  # every wiki searched (its speed: bench/many_wikis.py)
