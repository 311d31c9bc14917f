"""Shared fixtures: a fresh copy of the tiny fixture workspace per test, and a clean environment."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from wikirag import Workspace
from wikirag.cache import DEFAULT_CACHE

FIXTURES = Path(__file__).parent / "fixtures"
REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session", autouse=True)
def _scan_streamlit_components_once() -> Iterator[None]:
    """Every ``AppTest`` run of a new AppTest scans the metadata of every installed distribution for Streamlit
    components (``scan_component_manifests``): ~0.3 s each, most of the time of the app tests. The installed
    distributions do not change during a session (tests/test_install.py installs into a venv of its own), so
    the scan runs once and its result is reused; each AppTest still registers the components in its own
    manager, as before."""
    try:
        from streamlit.components.v2 import manifest_scanner
        scan = manifest_scanner.scan_component_manifests
    except (ImportError, AttributeError):  # a Streamlit without that scan: nothing to save
        yield
        return
    found: list = []

    def scan_once(*args, **kwargs):
        if not found:
            found.append(scan(*args, **kwargs))
        return list(found[0])

    manifest_scanner.scan_component_manifests = scan_once
    try:
        yield
    finally:
        manifest_scanner.scan_component_manifests = scan


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Tests never see the developer's workspace, clearance or cache."""
    monkeypatch.delenv("WIKIRAG_HOME", raising=False)
    monkeypatch.delenv("WIKIRAG_CLEARANCE", raising=False)
    monkeypatch.setenv("WIKIRAG_CACHE", str(tmp_path / "cache"))
    DEFAULT_CACHE.clear()


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """A copy of tests/fixtures/workspace: wikis alpha (public), beta (internal), gamma (confidential)."""
    target = tmp_path / "ws"
    shutil.copytree(FIXTURES / "workspace", target)
    return target


@pytest.fixture
def ws(home: Path) -> Workspace:
    """Tests edit files as another process would; no recheck delay, so edits apply at once."""
    return Workspace(home, recheck_seconds=0)


@pytest.fixture
def built(ws: Workspace) -> Workspace:
    """The fixture workspace with every wiki indexed."""
    from wikirag import build

    for name in ws.wiki_names():
        build(ws.wiki(name))
    return ws


@pytest.fixture(scope="session")
def built_examples(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bundled examples (the checkout's wikis/ and rags/, without any .index there), every wiki built,
    once per session: building them takes ~15 s. Never use it in place: take a copy with
    :func:`copy_built_examples` (~0.5 s)."""
    from wikirag import build

    home = tmp_path_factory.mktemp("examples") / "ws"
    for part in ("wikis", "rags"):
        shutil.copytree(REPO / part, home / part, ignore=shutil.ignore_patterns(".index"))
    ws = Workspace(home)
    for name in ws.wiki_names():
        build(ws.wiki(name))
    return home


def copy_built_examples(built_examples: Path, target: Path) -> Path:
    """A copy of the session's built examples at ``target``, for a test to use and change, in the state a build
    of the examples there leaves: the copied indexes record the other folder (a build's settings include its
    source's path), so each wiki is built again there — reusing every passage and vector of the copied build,
    as an incremental build does — and the copied build is then removed, leaving one build per wiki."""
    from wikirag import build, store

    shutil.copytree(built_examples, target, symlinks=True)
    ws = Workspace(target)
    for name in ws.wiki_names():
        wiki = ws.wiki(name)
        build(wiki)
        with store.build_lock(wiki):
            store.sweep(wiki, keep={store.current_build_id(wiki)})
    return target


def make_wiki(home: Path, name: str, files: dict[str, bytes | str], sensitivity: str = "public",
              extra: str = "") -> Path:
    """Write ``wikis/<name>/`` with a manifest and ``files`` (bytes are written as-is)."""
    folder = home / "wikis" / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / ".wiki.yaml").write_text(
        f"name: {name}\ntitle: {name}\nsensitivity: {sensitivity}\n{extra}", encoding="utf-8"
    )
    for rel, content in files.items():
        path = folder / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
    return folder


@pytest.fixture(scope="session")
def _local_model_state(tmp_path_factory: pytest.TempPathFactory):
    """The bundled local model, served once for the whole test session over real HTTP."""
    import os

    from wikirag import localmodel

    cache = tmp_path_factory.mktemp("local-model-cache")
    previous = os.environ.get("WIKIRAG_CACHE")
    os.environ["WIKIRAG_CACHE"] = str(cache)
    try:
        server = localmodel.ensure_running()
        yield cache, server
    finally:
        localmodel.stop()
        if previous is None:
            os.environ.pop("WIKIRAG_CACHE", None)
        else:
            os.environ["WIKIRAG_CACHE"] = previous


@pytest.fixture
def local_model(_local_model_state, monkeypatch: pytest.MonkeyPatch):
    """Point wikirag at the session's local model server."""
    cache, server = _local_model_state
    monkeypatch.setenv("WIKIRAG_CACHE", str(cache))
    return server


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free now (for a server a test starts)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until_healthy(url: str, server: subprocess.Popen, output, seconds: float = 60) -> None:
    """Wait until the Streamlit server at ``url`` answers its health check with "ok"; fail with the
    server's ``output()`` if it exits first, or if it does not answer within ``seconds``."""
    import time
    import urllib.request

    started = time.monotonic()
    while True:
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=1) as response:
                if response.status == 200 and response.read().decode() == "ok":
                    return
        except OSError:
            pass
        assert server.poll() is None, output()
        assert time.monotonic() - started < seconds, f"the app did not answer within {seconds:g} s:\n" + output()
        time.sleep(0.2)


MEMORY_PROBE = textwrap.dedent("""
    import json, sys, time
    from wikirag import Workspace, build
    started = time.perf_counter()
    report = build(Workspace(sys.argv[1]).wiki(sys.argv[2]))
    peak = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM"))
    print(json.dumps({"peak_mb": peak / 1024, "seconds": time.perf_counter() - started, "files": report.files,
                      "chunks": report.chunks, "skipped": [[s.path, s.reason] for s in report.skipped]}))
""")


def build_probe(home: Path, wiki: str) -> dict:
    """Build ``wiki`` in a fresh process; its time, peak memory (VmHWM) and report."""
    out = subprocess.run([sys.executable, "-c", MEMORY_PROBE, str(home), wiki], capture_output=True, text=True,
                         check=True, timeout=600)
    return json.loads(out.stdout)
