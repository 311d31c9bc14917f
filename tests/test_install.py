"""The app ships in the package: a wheel built from the checkout, installed plainly (not editable) into a
fresh venv, serves ``wikirag app`` from a folder outside the checkout.

To stay fast, the temporary venv gets no dependencies from PyPI: a ``.pth`` line adds the running
interpreter's site-packages (this venv's) to its ``sys.path``. A path added that way does not have its own
``.pth`` files processed, so the editable install of ``wikirag`` there stays inactive and ``import wikirag``
finds the wheel's copy (asserted). Building the wheel fetches setuptools from PyPI (build isolation).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import urllib.request
import zipfile
from pathlib import Path

import pytest

from .conftest import free_port, wait_until_healthy

REPO = Path(__file__).resolve().parent.parent
APP_FILES = {f"wikirag/webapp/{name}.py" for name in ("__init__", "router", "ui", "signin", "chat", "compare",
                                                      "portal")}
# copied to a scratch folder before building: a build in the checkout would leave build/ behind, whose stale
# files can end up in later wheels, while other work goes on in the checkout
NOT_SOURCE = shutil.ignore_patterns(".venv", ".git", "build", "dist", "*.egg-info", "__pycache__", ".index",
                                    ".pytest_cache", ".ruff_cache", ".audit", "wikis", "rags", "bench", "tests")

# run with the temporary venv's interpreter: the installed router and its pages, through AppTest
CHECK_PAGES = """
import json, time, wikirag, wikirag.webapp as webapp
from streamlit.testing.v1 import AppTest
from wikirag.access import Level
from wikirag.users import User

at = AppTest.from_file(str(webapp.ROUTER), default_timeout=60).run()
assert not at.exception, at.exception
titles = [t.value for t in at.title]
at = AppTest.from_file(str(webapp.ROUTER), default_timeout=60)
at.session_state["user"] = User("someone", Level.PUBLIC)
at.session_state["signed_in_at"] = time.time()
at.query_params["wiki"] = "alpha"
at.switch_page("portal.py").run()
assert not at.exception, at.exception
print(json.dumps({"wikirag": wikirag.__file__, "router": str(webapp.ROUTER), "signed_out": titles,
                  "portal": [t.value for t in at.title], "links": len(at.get("page_link"))}))
"""


def _inside(path: str | Path, folder: Path) -> bool:
    return Path(path).resolve().is_relative_to(folder.resolve())




@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    source = tmp_path_factory.mktemp("source") / "wikirag"
    shutil.copytree(REPO, source, ignore=NOT_SOURCE)
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(source), "--no-deps", "--quiet", "-w", str(out)],
                   check=True, timeout=300)
    (built,) = out.glob("wikirag-*.whl")
    return built


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with the wheel installed (no dependencies; they come from this venv, see the docstring)."""
    root = tmp_path_factory.mktemp("venv") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True, timeout=120)
    python = root / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    (Path(site) / "outer_site_packages.pth").write_text(sysconfig.get_paths()["purelib"] + "\n", encoding="utf-8")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--quiet",
                    str(wheel)], check=True, timeout=300)
    return root


def test_the_wheel_carries_the_app_inside_the_package(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        top_level = z.read(next(n for n in names if n.endswith(".dist-info/top_level.txt"))).decode().split()
    assert APP_FILES <= names
    # every module of the checkout's package is in the wheel (a subpackage left out of pyproject fails here)
    modules = {p.relative_to(REPO).as_posix() for p in (REPO / "wikirag").rglob("*.py")}
    assert modules <= names, sorted(modules - names)
    assert "wikirag/demo_users.yaml" in names
    assert top_level == ["wikirag"]
    assert all(n.startswith(("wikirag/", "wikirag-")) for n in names), sorted(names)
    assert not any(n == "app.py" or n.startswith("pages/") or n.endswith("/app.py") for n in names)
    assert not any("/pages/" in n for n in names)  # none beside the router either: see wikirag.webapp


@pytest.fixture
def outside(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A folder outside the checkout to run from, and an environment naming a copy of the fixture workspace."""
    shutil.copytree(REPO / "tests" / "fixtures" / "workspace", tmp_path / "ws")
    (tmp_path / "elsewhere").mkdir()
    env = {**os.environ, "WIKIRAG_HOME": str(tmp_path / "ws"), "WIKIRAG_CACHE": str(tmp_path / "cache")}
    env.pop("PYTHONPATH", None)
    return tmp_path / "elsewhere", env


def _streamlit_settings() -> dict[str, str]:
    """The checkout's .streamlit/config.toml as command-line flags (Streamlit reads that file from the cwd only)."""
    tomllib = pytest.importorskip("tomllib")
    config = tomllib.loads((REPO / ".streamlit" / "config.toml").read_text(encoding="utf-8"))
    return {f"--{section}.{key}": str(value).lower() if isinstance(value, bool) else str(value)
            for section, values in config.items() for key, value in values.items()}


def test_the_installed_app_runs_its_pages(venv: Path, outside: tuple[Path, dict[str, str]]) -> None:
    folder, env = outside
    done = subprocess.run([str(venv / "bin" / "python"), "-c", CHECK_PAGES], check=False, cwd=folder, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert _inside(seen["wikirag"], venv) and _inside(seen["router"], venv)  # the wheel's copy, not the checkout
    assert seen["signed_out"] == ["wikirag"]  # the sign-in page
    # a wiki in the portal, with its page links (st.page_link resolves them against the installed router)
    assert seen["portal"] == ["Alpha garden notes"] and seen["links"] > 1


def test_wikirag_app_serves_from_any_folder(venv: Path, outside: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    folder, env = outside
    port = free_port()
    log = tmp_path / "app.log"
    with log.open("wb") as out:
        server = subprocess.Popen([str(venv / "bin" / "wikirag"), "app", "--port", str(port)], cwd=folder, env=env,
                                  stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_healthy(url, server, log.read_text)
        with urllib.request.urlopen(url, timeout=10) as response:
            assert response.status == 200 and b"<html" in response.read().lower()
        # wikirag app became `python -m streamlit run <the installed router>`, with config.toml's settings as flags
        command = Path(f"/proc/{server.pid}/cmdline").read_bytes().decode().split("\0")[:-1]
        assert command[1:4] == ["-m", "streamlit", "run"] and _inside(command[4], venv)
        assert Path(command[4]).name == "router.py"
        flags = dict(zip(command[5::2], command[6::2]))
        assert flags["--server.port"] == str(port) and flags["--server.address"] == "127.0.0.1"
        assert _streamlit_settings().items() <= flags.items()
        assert "Traceback" not in log.read_text(), log.read_text()
        # one PID is the app: SIGTERM to it (kill PID, docker stop) stops the server, nothing left serving
        os.kill(server.pid, signal.SIGTERM)
        assert server.wait(timeout=20) is not None
        with pytest.raises(OSError):
            urllib.request.urlopen(url, timeout=5)
        with pytest.raises(ProcessLookupError):
            os.killpg(server.pid, 0)  # no process of its session remains
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(timeout=20)
