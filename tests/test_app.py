"""The web app's pages with streamlit.testing.AppTest: sign-in gate, clearance filtering, chat, compare,
portal. A public user must see nothing internal anywhere (markers are planted in the example wikis).

The tests run the checkout's ``app.py`` and open a page through its thin ``pages/<name>.py``
(``at.switch_page`` before the first run), which runs the router, which runs the package's page script
``wikirag/webapp/<name>.py``; one test runs the package's router directly, as ``wikirag app`` does.
"""

from __future__ import annotations

import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from wikirag import webapp
from wikirag.access import Level
from wikirag.users import User

from .conftest import copy_built_examples

REPO = Path(__file__).resolve().parent.parent
INTERNAL = ["NWL-INTERNAL-3K8P", "engineering-handbook", "Northwind"]
CONFIDENTIAL = ["NWL-CONFIDENTIAL-7Q4Z", "security-runbooks"]


@pytest.fixture(scope="module")
def app_home(built_examples: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A copy of the bundled examples, built, as the app's workspace (the repository is never written)."""
    yield copy_built_examples(built_examples, tmp_path_factory.mktemp("app") / "ws")


@pytest.fixture(autouse=True)
def _app_env(app_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Point the app at the copy (after conftest's clean environment, which unsets WIKIRAG_HOME)."""
    monkeypatch.setenv("WIKIRAG_HOME", str(app_home))
    monkeypatch.setenv("WIKIRAG_DEMO", "1")
    monkeypatch.delenv("WIKIRAG_USERS", raising=False)
    monkeypatch.delenv("WIKIRAG_MODEL", raising=False)


def _app(app_home: Path, user: User | None = None, page: str | None = None, entry: Path = REPO / "app.py",
         fresh: bool = True, **params: str) -> AppTest:
    if fresh:  # a new process's resources (fresh=False: the same process, e.g. its one watcher)
        st.cache_resource.clear()
    at = AppTest.from_file(str(entry), default_timeout=120)
    if user is not None:
        at.session_state["user"] = user
        at.session_state["signed_in_at"] = time.time()
    for key, value in params.items():
        at.query_params[key] = value
    if page:
        at.switch_page(page)
    return at.run()


def _text(at: AppTest) -> str:
    """Everything the page shows (every element's protobuf, as text)."""
    def walk(node) -> list[str]:
        children = getattr(node, "children", None) or {}
        children = children.values() if isinstance(children, dict) else children
        return [str(getattr(node, "proto", ""))] + [t for child in children for t in walk(child)]
    return "\n".join(walk(at._tree))


PUBLIC = User("demo-public", Level.PUBLIC)
INTERNAL_USER = User("demo-internal", Level.INTERNAL)
BUILDER = User("demo-confidential", Level.CONFIDENTIAL, can_build=True)


@pytest.mark.parametrize("page", [None, "pages/chat.py", "pages/compare.py", "pages/portal.py"])
def test_nothing_is_shown_before_sign_in(app_home: Path, page: str | None) -> None:
    at = _app(app_home, None, page, wiki="brewing", path="methods/v60.md")
    assert not at.exception
    # the router shows only the sign-in page, even for a page's URL on the process's first run (when Streamlit
    # still routes it straight to pages/<name>.py: see there); a page reached anyway would stop at its own check
    assert [t.value for t in at.title] == ["wikirag"]
    shown = _text(at)
    for secret in ["V60", "brewing/", "Grind", *INTERNAL, *CONFIDENTIAL]:
        assert secret not in shown


@pytest.mark.parametrize(("name", "password"), [("demo-internal", "wrong-password"), ("nobody", "whatever-pw")])
def test_a_failed_sign_in_does_not_say_whether_the_user_exists(app_home: Path, name: str, password: str) -> None:
    at = _app(app_home)
    at.text_input[0].input(name)
    at.text_input[1].input(password)
    at.button[0].click().run()
    assert [e.value for e in at.error] == ["Wrong user name or password."]
    assert "user" not in at.session_state


def _sign_in(at: AppTest, name: str, password: str) -> AppTest:
    at.text_input[0].input(name)
    at.text_input[1].input(password)
    return at.button[0].click().run()


@pytest.mark.parametrize("name", ["demo-internal", "nobody"])
def test_an_over_long_password_fails_like_a_wrong_one(app_home: Path, name: str) -> None:
    """bcrypt 5 raises ValueError beyond 72 bytes: that used to reach the page as a traceback with server paths."""
    at = _sign_in(_app(app_home), name, "p" * 100)
    assert not at.exception
    assert [e.value for e in at.error] == ["Wrong user name or password."]
    assert "Traceback" not in _text(at) and "72 bytes" not in _text(at) and "user" not in at.session_state


def test_an_unexpected_sign_in_failure_is_a_normal_message(app_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from wikirag.users import UserStore

    def broken(*_, **__):
        raise RuntimeError(f"something broke in {app_home}")

    monkeypatch.setattr(UserStore, "authenticate", broken)
    at = _sign_in(_app(app_home), "demo-internal", "demo-internal-pw")
    assert not at.exception
    assert [e.value for e in at.error] == [
        "Sign-in failed. Try again; if it keeps failing, ask an administrator (the server's log says why)."]
    assert str(app_home) not in _text(at) and "RuntimeError" not in _text(at)


def test_a_broken_accounts_file_shows_no_path(app_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    users = tmp_path / "users.yaml"
    users.write_text((REPO / "wikirag" / "demo_users.yaml").read_text())  # a published password, outside demo mode
    monkeypatch.setenv("WIKIRAG_USERS", str(users))
    monkeypatch.delenv("WIKIRAG_DEMO")
    at = _app(app_home)
    assert not at.exception and not at.text_input
    assert [e.value for e in at.error] == [
        "Sign-in is not available: the accounts file is not usable. The server's log says why."]
    assert str(tmp_path) not in _text(at)


def test_the_settings_show_no_error_details_and_no_page_list() -> None:
    """For `streamlit run app.py` (wikirag app passes the same flags: tests/test_install.py). Streamlit's old value
    false for showErrorDetails now means "stacktrace", which still shows a traceback: "none" shows none."""
    import tomllib

    settings = tomllib.loads((REPO / ".streamlit" / "config.toml").read_text(encoding="utf-8"))
    client = settings["client"]
    assert client["showErrorDetails"] == "none" and client["showSidebarNavigation"] is False
    # no ast.parse of each page (CPython 3.11's AST conversion races other threads: see the config's comment)
    assert settings["runner"]["magicEnabled"] is False
    from streamlit import config

    assert config.get_option("runner.magicEnabled") is False  # what AppTest runs with, from the checkout


def test_sign_in_and_out(app_home: Path) -> None:
    at = _app(app_home)
    at.text_input[0].input("demo-internal")
    at.text_input[1].input("demo-internal-pw")
    at.button[0].click().run()
    assert at.session_state["user"].clearance == Level.INTERNAL
    at = _app(app_home, at.session_state["user"])  # the router, signed in
    assert [t.value for t in at.title] == ["Chat"]
    assert "clearance: `internal`" in at.sidebar.markdown[0].value
    # the app's pages as links in the sidebar (Streamlit's own page list is hidden: see wikirag.webapp.router)
    assert [link.proto.label for link in at.sidebar.get("page_link")] == ["Chat", "Compare", "Knowledge base"]
    at.sidebar.button[0].click().run()  # sign out
    assert "user" not in at.session_state
    at.run()
    assert not at.chat_input and "Signed in as" not in _text(at)


@pytest.mark.parametrize("page", ["pages/chat.py", "pages/compare.py", "pages/portal.py"])
def test_a_public_user_sees_nothing_internal(app_home: Path, page: str) -> None:
    at = _app(app_home, PUBLIC, page)
    assert not at.exception
    shown = _text(at)
    for secret in [*INTERNAL, *CONFIDENTIAL, "engineering", "security"]:
        assert secret not in shown, f"{secret} leaked on {page}"
    if page == "pages/chat.py":
        options = at.selectbox[0].options
        assert len(options) == 2 and options[0].startswith("public-help") and options[1] == "Ad hoc: pick wikis…"


def test_a_public_user_chat_and_ad_hoc_wikis(app_home: Path) -> None:
    at = _app(app_home, PUBLIC, "pages/chat.py")
    at.selectbox[0].select("Ad hoc: pick wikis…").run()
    assert at.multiselect[0].options == ["brewing", "wikirag-guide"]
    at.chat_input[0].set_value("Who approves a production deploy, and what is the SEV2 response time?").run()
    shown = _text(at)
    for secret in [*INTERNAL, *CONFIDENTIAL]:
        assert secret not in shown


@pytest.mark.parametrize("wiki,path", [
    ("engineering-handbook", "operations/deploying.md"),      # above the user's clearance
    ("security-runbooks", "leaked-api-key.md"),
    ("brewing", "../engineering-handbook/operations/deploying.md"),  # path traversal
    ("brewing", "%2e%2e/engineering-handbook/operations/deploying.md"),
    ("brewing", "/etc/passwd"),
    ("brewing", "_template.md"),                               # a meta file, not a page (index.md is one)
    ("../wikis/engineering-handbook", "code-review.md"),
])
def test_page_view_by_url_refuses_what_the_user_may_not_see(app_home: Path, wiki: str, path: str) -> None:
    at = _app(app_home, PUBLIC, "pages/portal.py", wiki=wiki, path=path)
    assert not at.exception
    assert [e.value for e in at.error] == ["That page does not exist, or you may not see it."]
    shown = _text(at)
    for secret in [*CONFIDENTIAL, "NWL-INTERNAL-3K8P", "root:"]:
        assert secret not in shown


def test_page_view_highlights_the_cited_characters(app_home: Path) -> None:
    source = (app_home / "wikis/brewing/methods/v60.md").read_text(encoding="utf-8")
    start = source.index("## ")
    end = source.index("\n\n", start + 4)
    at = _app(app_home, PUBLIC, "pages/portal.py", wiki="brewing", path="methods/v60.md",
              start=str(start), end=str(end))
    assert not at.exception and not at.error
    assert any("Cited passage" in c.value for c in at.caption)
    assert any(source[start:end] == m.value for m in at.markdown)


@pytest.mark.parametrize("user, sees_runbook", [(INTERNAL_USER, False), (BUILDER, True)])
def test_page_view_shows_links_and_backlinks(app_home: Path, user: User, sees_runbook: bool) -> None:
    at = _app(app_home, user, "pages/portal.py", wiki="northwind-systems", path="services/cobalt-db.md")
    assert not at.exception and not at.error
    assert [h.value for h in at.subheader] == ["Links (2)", "Backlinks (4)"]
    shown = _text(at)
    assert "northwind-systems/projects/falcon.md:14" in shown  # a backlink, with its line
    assert "northwind-systems/teams/storage.md" in shown  # a link, resolved
    # the link into the confidential runbooks: opened for a confidential user, plain text for an internal one
    assert ("security-runbooks/rotating-database-credentials.md" in shown) == sees_runbook
    assert ("no page you can open" in shown) != sees_runbook
    # the page itself: its wikilinks are links to the pages' views (one above the clearance stays text)
    page = next(m.value for m in at.markdown if m.value.startswith("# Cobalt DB"))
    assert "[Storage team](portal?wiki=northwind-systems&path=teams%2Fstorage.md)" in page and "[[" not in page
    runbook = "(portal?wiki=security-runbooks&path=rotating-database-credentials.md)"
    assert (runbook in page) == sees_runbook


def test_chat_round_trip_with_the_offline_default(app_home: Path) -> None:
    at = _app(app_home, INTERNAL_USER, "pages/chat.py")
    at.selectbox[0].select("engineering").run()
    assert at.text_input[0].value == "extractive"
    at.chat_input[0].set_value("How fast must a SEV2 page be acknowledged?").run()
    assert not at.exception
    messages = at.chat_message
    assert [m.name for m in messages] == ["user", "assistant"]
    answer = messages[1].markdown[0].value
    assert "[1]" in answer or "[2]" in answer
    assert any("retrieval" in c.value and "extractive" in c.value for c in at.caption)
    # the history survives a rerun
    at.run()
    assert [m.name for m in at.chat_message] == ["user", "assistant"]


def test_compare_two_compositions(app_home: Path) -> None:
    at = _app(app_home, INTERNAL_USER, "pages/compare.py")
    at.multiselect[0].set_value(["public-help", "engineering"])
    at.text_input[1].input("How do I rebuild a wiki after editing a page?")
    at.button[0].click().run()
    assert not at.exception
    assert [h.value for h in at.subheader] == ["public-help", "engineering"]
    summary = [c.value for c in at.caption if "passages:" in c.value]
    assert len(summary) == 2 and all("shared" in s and "unique" in s for s in summary)
    # why: each composition's top passage, the wiki it came from and who else lists that wiki
    why = [m.value for m in at.markdown if m.value.startswith("- **")]
    assert len(why) == 2, why
    assert any("top passage from **wikirag-guide** (also in" in w for w in why)  # both list the guide
    # each composition's routing: P(wiki | question) of each of its wikis, the most likely first
    routing = [c.value for c in at.caption if c.value.startswith("Routing: ")]
    assert len(routing) == 2, routing
    assert all(r.count("%") == 2 for r in routing), routing  # two wikis each
    assert any(r.startswith("Routing: wikirag-guide ") for r in routing), routing  # a question about wikirag
    # a question only the brewing wiki answers: public-help is the one to choose
    at.text_input[1].input("How long should a French press steep?")
    at.button[0].click().run()
    assert not at.exception
    texts = [m.value for m in at.markdown]
    assert "**Choose public-help** for this question" in " ".join(texts), texts
    assert any(t.startswith("- **public-help**: top passage from **brewing** (only public-help lists brewing)")
               for t in texts), texts


def test_portal_lists_status_and_rebuilds(app_home: Path) -> None:
    at = _app(app_home, BUILDER, "pages/portal.py")
    assert not at.exception
    assert "security-runbooks" in _text(at)
    at.selectbox[0].select("brewing")
    at.button[0].click().run()
    assert not at.exception

    def ended() -> bool:
        return any("brewing: " in s.label and ("built" in s.label or "up to date" in s.label) for s in at.status)

    deadline = time.monotonic() + 60  # the build runs in the background: the page shows its end when it comes
    while not ended() and time.monotonic() < deadline:
        time.sleep(0.5)
        at.run()
    assert ended() and not at.exception
    assert [s.label for s in at.status if s.label.startswith("brewing: up to date")], [s.label for s in at.status]
    # the index state in words (no emoji: blank boxes in Debian's Chromium); one way to open a wiki
    cards = [c.value for c in at.caption if " files · " in c.value]
    states = {re.search(r"index (.+?) · dense", c).group(1) for c in cards}
    assert len(cards) == 5 and states <= {"fresh", "stale: rebuild", "missing: build it", "incompatible: rebuild"}
    assert not [m for m in at.markdown if "Browse:" in m.value]
    # force: every page re-read and re-chunked, although nothing changed
    at.checkbox[0].check().run()
    at.button[0].click().run()
    forced = lambda: [s.label for s in at.status if s.label.startswith("brewing: built")]
    deadline = time.monotonic() + 60
    while not forced() and time.monotonic() < deadline:
        time.sleep(0.5)
        at.run()
    assert forced(), [s.label for s in at.status]  # (without force: "up to date", nothing to do)
    public = _app(app_home, PUBLIC, "pages/portal.py")
    assert not public.main.button  # no rebuild for users who may not build (the sidebar has "Sign out")


def test_the_checkout_entries_are_thin() -> None:
    """One ``pages/<name>.py`` per page of the package, each only running the router; nothing else there."""
    assert sorted(p.name for p in (REPO / "pages").iterdir() if p.name != "__pycache__") == sorted(
        f"{name}.py" for name in webapp.PAGE_NAMES)
    for entry in [REPO / "app.py", *(REPO / "pages").glob("*.py")]:
        code = [line for line in entry.read_text(encoding="utf-8").split('"""')[-1].splitlines() if line]
        assert code == ["from wikirag.webapp.router import main", "main()"], entry


def test_the_package_router_serves_the_same_pages(app_home: Path) -> None:
    """What ``wikirag app`` runs: the router in the package, its pages and the links between them."""
    assert [t.value for t in _app(app_home, None, entry=webapp.ROUTER).title] == ["wikirag"]  # sign-in only
    at = _app(app_home, INTERNAL_USER, entry=webapp.ROUTER)
    assert [t.value for t in at.title] == ["Chat"] and "Signed in as" in at.sidebar.markdown[0].value
    at.selectbox[0].select("engineering").run()
    at.chat_input[0].set_value("How fast must a SEV2 page be acknowledged?").run()
    assert not at.exception
    assert "Open engineering-handbook/" in _text(at)  # a citation's link into the portal resolved
    for key, value in {"wiki": "engineering-handbook", "path": "operations/deploying.md", "start": "0",
                       "end": "40"}.items():
        at.query_params[key] = value
    at.switch_page("portal.py").run()  # relative to the router: the package's page script
    assert not at.exception and not at.error
    assert [t.value for t in at.title] == ["operations/deploying.md"]
    assert any("Cited passage" in c.value for c in at.caption)


def test_the_app_watching_its_sources_keeps_itself_fresh(app_home: Path, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """``wikirag app --watch`` (WIKIRAG_WATCH=1): one watcher in the app's process; an edited page is answerable
    in the chat on its own; the portal shows "updated N s ago" and the watcher's build errors, each only to
    users who may see its wiki."""
    from wikirag.watch import Live
    from wikirag.webapp import ui

    home = tmp_path / "ws"
    shutil.copytree(app_home, home)  # with its indexes: nothing to catch up
    monkeypatch.setenv("WIKIRAG_HOME", str(home))
    monkeypatch.setenv("WIKIRAG_WATCH", "1")
    at = _app(home, BUILDER, "pages/portal.py")
    watcher = ui.live_watcher()
    try:
        assert watcher is not None and watcher.ready.wait(60)
        assert ui.live_watcher() is watcher  # one per process, whichever session asks
        at.run()
        assert not at.exception
        assert any("Live:" in c.value for c in at.caption)
        cards = [c.value for c in at.caption if " files · " in c.value]
        assert cards and all(re.search(r"updated \d+ (s|min) ago", c) for c in cards), cards

        page = home / "wikis/brewing/fundamentals.md"
        page.write_text(page.read_text() + "\n## Kettle\n\nThe zqxlive kettle must be descaled every 40 days.\n")
        chat = _app(home, PUBLIC, "pages/chat.py", fresh=False)
        chat.selectbox[0].select("public-help").run()
        deadline, answered = time.monotonic() + 20, False
        while not answered and time.monotonic() < deadline:
            chat.chat_input[0].set_value("How often must the zqxlive kettle be descaled?").run()
            answered = "40 days" in chat.chat_message[-1].markdown[0].value
        assert answered and not chat.exception

        runbooks = home / "wikis/engineering-handbook"
        moved = tmp_path / "moved"
        moved.mkdir()
        for md in list(runbooks.glob("*.md")) + [runbooks / "development", runbooks / "operations"]:
            md.rename(moved / md.name)  # emptied: the build fails, the previous index keeps serving
        deadline = time.monotonic() + 20
        while not (watcher.live.get("engineering-handbook") or Live()).error and time.monotonic() < deadline:
            time.sleep(0.2)
        assert "has nothing to index" in watcher.live["engineering-handbook"].error
        internal = _app(home, INTERNAL_USER, "pages/portal.py", fresh=False)
        assert any("engineering-handbook" in e.value and "nothing to index" in e.value for e in internal.error)
        public = _app(home, PUBLIC, "pages/portal.py", fresh=False)
        assert not public.exception and "engineering-handbook" not in _text(public)
        assert "nothing to index" not in _text(public)
    finally:
        watcher.stop.set()


def test_defaults_follow_the_workspace_and_each_users_last_choice(app_home: Path) -> None:
    # a composition added later, first by name, does not become the default
    (app_home / "rags/aaa-notes.yaml").write_text("sensitivity: public\nwikis: [brewing]\n")
    try:
        for user, wanted in [(User("fresh-public", Level.PUBLIC), "public-help"),
                             (User("fresh-internal", Level.INTERNAL), "engineering"),
                             (User("fresh-confidential", Level.CONFIDENTIAL), "security")]:
            at = _app(app_home, user, "pages/chat.py")
            assert at.selectbox[0].value == wanted, user
        # a user's last choice is offered first, in a later session too
        picker = User("picks-systems", Level.INTERNAL)
        _app(app_home, picker, "pages/chat.py").selectbox[0].select("systems").run()
        assert _app(app_home, picker, "pages/chat.py").selectbox[0].value == "systems"
        # compare: the two that differ most in what they cover (security and public-help share no wiki)
        at = _app(app_home, User("fresh-compare", Level.CONFIDENTIAL), "pages/compare.py")
        assert at.multiselect[0].value == ["security", "public-help"]
        at.multiselect[0].set_value(["engineering", "systems"])
        at.text_input[1].input("Who owns Cobalt DB?")
        at.button[0].click().run()
        assert _app(app_home, User("fresh-compare", Level.CONFIDENTIAL), "pages/compare.py").multiselect[0].value \
            == ["engineering", "systems"]
    finally:
        (app_home / "rags/aaa-notes.yaml").unlink()


def test_a_user_with_one_composition_compares_it_with_wikis(app_home: Path) -> None:
    at = _app(app_home, User("lone-public", Level.PUBLIC), "pages/compare.py")
    assert not at.exception and not [i for i in at.info if "at least two" in i.value]
    assert at.multiselect[0].options == ["brewing", "wikirag-guide"]
    at.multiselect[0].set_value(["brewing"])
    at.text_input[1].input("How hot should the water be for a V60?")
    at.button[0].click().run()
    assert not at.exception
    assert [h.value for h in at.subheader] == ["public-help", "ad hoc: brewing"]
    shown = _text(at)
    for secret in [*INTERNAL, *CONFIDENTIAL]:
        assert secret not in shown
