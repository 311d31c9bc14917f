"""The leak matrix: every clearance × every composition (good, hand-edited, ad hoc) × every surface.

Each non-public fixture wiki carries a unique marker in a page and in its manifest's description:
``BETA-INTERNAL-MARK`` (internal), ``GAMMA-CONFIDENTIAL-MARK`` (confidential), ``DELTA-RESTRICTED-MARK``
(restricted). No marker above a user's clearance may appear in anything wikirag outputs to that user:
library results and answers, CLI output (stdout and stderr), the app's pages (chat, compare, portal,
page view by URL), error messages, Python logs and the audit log; and kept conversations (loaded, as a
follow-up's history, exported, listed) once the clearance is lower than when they were kept.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import pytest
import streamlit as st
from click.testing import CliRunner
from streamlit.testing.v1 import AppTest

from wikirag import Workspace, build
from wikirag.access import Level
from wikirag.answers import AnswerResult, answer
from wikirag.cli import cli
from wikirag.conversations import ConversationStore
from wikirag.errors import IndexMissing, WikiragError
from wikirag.passage import Passage
from wikirag.prompt import check_citations
from wikirag.retrieval import search
from wikirag.users import User

from .conftest import make_wiki

REPO = Path(__file__).resolve().parent.parent
MARKERS = {Level.INTERNAL: "BETA-INTERNAL-MARK", Level.CONFIDENTIAL: "GAMMA-CONFIDENTIAL-MARK",
           Level.RESTRICTED: "DELTA-RESTRICTED-MARK"}
QUESTIONS = ["deploys keys compost board", "beta internal mark gamma confidential delta restricted",
             "marker vault chair rotation"]
COMPOSITIONS = ["open", "team", "secret", "top", "sneaky", "ceiling", "outside", "sec2", "hand", "mirror", "nosuch"]
TRAVERSALS = ["../gamma/keys.md", "..%2Fgamma%2Fkeys.md", "%2e%2e/gamma/keys.md", "/etc/passwd",
              "keys.md", "minutes.md", "../../wikis/delta/minutes.md", "secret-link.md"]


class Checker:
    """Counts every output looked at and every leak found."""

    def __init__(self) -> None:
        self.outputs = 0
        self.leaks: list[str] = []
        self.seen: set[str] = set()  # markers the user may see and did see: proves the probes reach them

    def check(self, text: str, clearance: Level, where: str) -> None:
        self.outputs += 1
        for level, marker in MARKERS.items():
            if marker in text:
                if level > clearance:
                    self.leaks.append(f"{marker} reached a {clearance} user through {where}")
                else:
                    self.seen.add(marker)


@pytest.fixture(scope="module")
def leak_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import shutil

    home = tmp_path_factory.mktemp("leaks") / "ws"
    shutil.copytree(Path(__file__).parent / "fixtures" / "workspace", home)
    # a public wiki with a symlink to a confidential page: the link is not followed
    folder = make_wiki(home, "epsilon", {"notes.md": "# Notes\n\nPublic notes about compost and deploys here.\n"})
    (folder / "secret-link.md").symlink_to(home / "wikis" / "gamma" / "keys.md")
    rags = home / "rags"
    # hand-edited compositions: a public one listing a confidential wiki, one whose ceiling is a lie
    (rags / "sneaky.yaml").write_text("sensitivity: public\nwikis: [alpha, gamma]\n")
    (rags / "ceiling.yaml").write_text("sensitivity: internal\nwikis: [beta, delta]\n")
    (rags / "outside.yaml").write_text("sensitivity: public\nwikis: [epsilon, alpha]\n")
    # the graph layer everywhere, and links across levels both ways; the links from higher wikis carry
    # their level's marker in the alias, so a backlink or a link path shown to a lower user is caught
    for wiki in ("alpha", "beta", "gamma", "delta"):
        with (home / "wikis" / wiki / ".wiki.yaml").open("a") as fh:
            fh.write("layers: {graph: {}}\n")
    with (home / "wikis" / "alpha" / "tomatoes.md").open("a") as fh:
        fh.write("\nCompost for deploys: [[beta:deploys]], keys [[gamma:keys]], minutes [[delta:minutes]].\n")
    for wiki, page, marker in (("beta", "deploys.md", "BETA-INTERNAL-MARK"),
                               ("gamma", "keys.md", "GAMMA-CONFIDENTIAL-MARK"),
                               ("delta", "minutes.md", "DELTA-RESTRICTED-MARK")):
        with (home / "wikis" / wiki / page).open("a") as fh:
            fh.write(f"\nSee the tomatoes page, [[alpha:tomatoes|{marker}-LINK]], and [[compost|{marker}-LINK]].\n")
    # the red-team's files (issue 17): broken restricted manifests with the marker in their text, a
    # confidential composition naming a missing wiki, a public one naming a wiki above, a broken and a
    # missing one, and a public wiki whose source is a confidential wiki's folder
    (home / "wikis" / "omega").mkdir()
    (home / "wikis" / "omega" / ".wiki.yaml").write_text(
        'name: omega\ntitle: O\nsensitivity: "restricted: DELTA-RESTRICTED-MARK layoffs list"\n')
    (home / "wikis" / "sigma").mkdir()
    (home / "wikis" / "sigma" / ".wiki.yaml").write_text(
        "name: sigma\ntitle: S\nsensitivity: restricted\nDELTA-RESTRICTED-MARK-KEY: 1\n")
    (rags / "sec2.yaml").write_text("description: GAMMA-CONFIDENTIAL-MARK plans\nsensitivity: confidential\n"
                                    "wikis: [gamma, typo-wiki]\n")
    (rags / "hand.yaml").write_text("sensitivity: public\nwikis: [alpha, gamma, omega, sigma, missing-one]\n")
    make_wiki(home, "mirror", {}, extra="source: ../gamma\n")
    (rags / "mirror.yaml").write_text("sensitivity: public\nwikis: [mirror]\n")
    ws = Workspace(home)
    for name in ws.wiki_names():
        if name not in ("omega", "sigma"):
            build(ws.wiki(name))
    return home


@pytest.fixture
def env(leak_home: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("WIKIRAG_HOME", str(leak_home))
    monkeypatch.setenv("WIKIRAG_DEMO", "1")
    monkeypatch.delenv("WIKIRAG_MODEL", raising=False)
    return leak_home


def _library(ws: Workspace, checker: Checker, level: Level) -> None:
    def loads(name: str) -> bool:
        try:
            return bool(ws.wiki(name))
        except WikiragError:
            return False

    visible = [w for w in ws.wiki_names() if ws.level_of(w) <= level and loads(w)]
    targets = [*COMPOSITIONS, ws.adhoc(visible, level)]
    for target in targets:
        for question in QUESTIONS:
            where = f"library search of {getattr(target, 'name', target)}"
            try:
                result = search(ws, target, question, clearance=level, user="leak-test")
                checker.check(json.dumps([p.to_dict() for p in result.passages]) + " ".join(result.warnings),
                              level, where)
            except WikiragError as exc:
                checker.check(str(exc), level, where + " (error)")
            try:
                result = answer(ws, target, question, clearance=level, user="leak-test").result
                checker.check(json.dumps(result.to_dict(), default=str), level, f"answer from {where}")
            except WikiragError as exc:
                checker.check(str(exc), level, f"answer from {where} (error)")
    # ad-hoc selections that reach above the clearance are refused, and the refusal shows no content
    for wiki in ws.wiki_names():
        try:
            result = search(ws, ws.adhoc([wiki], level), QUESTIONS[0], clearance=level)
            checker.check(json.dumps([p.to_dict() for p in result.passages]), level, f"ad hoc [{wiki}]")
        except WikiragError as exc:
            checker.check(str(exc), level, f"ad hoc [{wiki}] (error)")


def _cli(home: Path, checker: Checker, level: Level) -> None:
    runner = CliRunner()
    base = ["--home", str(home)]
    for composition in COMPOSITIONS:
        for question in QUESTIONS:
            for args in (["query", composition, question, "--json"], ["query", composition, question],
                         ["ask", composition, question, "--json"], ["ask", composition, question]):
                result = runner.invoke(cli, [*base, *args, "--clearance", str(level)])
                checker.check(result.stdout + result.stderr, level, f"CLI {' '.join(args[:2])}")
    for args in (["list"], ["list", "--json"]):
        result = runner.invoke(cli, [*base, *args, "--clearance", str(level)])
        checker.check(result.stdout + result.stderr, level, f"CLI {' '.join(args)}")


def _app_text(at: AppTest) -> str:
    def walk(node) -> list[str]:
        children = getattr(node, "children", None) or {}
        children = children.values() if isinstance(children, dict) else children
        return [str(getattr(node, "proto", ""))] + [t for child in children for t in walk(child)]
    return "\n".join(walk(at._tree))


def _app(checker: Checker, level: Level, home: Path) -> None:
    user = User(f"leak-{level}", level)

    def run(page: str, **params: str) -> AppTest:
        st.cache_resource.clear()
        at = AppTest.from_file(str(REPO / "app.py"), default_timeout=120)
        at.session_state["user"] = user
        at.session_state["signed_in_at"] = time.time()
        for key, value in params.items():
            at.query_params[key] = value
        return at.switch_page(page).run()

    chat = run("pages/chat.py")
    for option in chat.selectbox[0].options:
        at = run("pages/chat.py")
        at.selectbox[0].select(option).run()
        if at.multiselect:  # ad hoc: every wiki the user may see
            at.multiselect[0].set_value(at.multiselect[0].options).run()
        for question in QUESTIONS:
            at.chat_input[0].set_value(question).run()
        checker.check(_app_text(at), level, f"app chat ({option[:20]})")
    compare = run("pages/compare.py")
    if compare.multiselect:
        compare.multiselect[0].set_value(compare.multiselect[0].options[:4])
        compare.text_input[1].input(QUESTIONS[0])
        compare.button[0].click().run()
    checker.check(_app_text(compare), level, "app compare")
    checker.check(_app_text(run("pages/portal.py")), level, "app portal")
    for wiki in ["omega", "sigma", "mirror"]:  # broken manifests and an overlapping source: the wiki view only
        checker.check(_app_text(run("pages/portal.py", wiki=wiki)), level, f"app portal ?wiki={wiki}")
    for wiki in ["alpha", "beta", "gamma", "delta", "epsilon", "../wikis/gamma"]:
        checker.check(_app_text(run("pages/portal.py", wiki=wiki)), level, f"app portal ?wiki={wiki}")
        for path in ["tomatoes.md", "deploys.md", *TRAVERSALS]:
            at = run("pages/portal.py", wiki=wiki, path=path, start="0", end="400")
            checker.check(_app_text(at), level, f"app page view {wiki}/{path}")


@pytest.mark.parametrize("level", list(Level), ids=str)
def test_no_marker_above_the_clearance_reaches_any_surface(env: Path, level: Level, caplog, capsys) -> None:
    caplog.set_level("DEBUG")
    checker = Checker()
    ws = Workspace(env, recheck_seconds=0)
    _library(ws, checker, level)
    _cli(env, checker, level)
    _app(checker, level, env)
    captured = capsys.readouterr()
    checker.check(caplog.text + captured.out + captured.err, level, "logs")
    audit_log = env / ".audit" / "audit.jsonl"
    checker.check(audit_log.read_text(encoding="utf-8") if audit_log.exists() else "", level, "audit log")
    assert checker.leaks == [], "\n".join(checker.leaks[:20])
    assert checker.outputs > 100
    # the same probes do find every marker the user is allowed to see, so the test is not vacuous
    assert checker.seen == {m for lvl, m in MARKERS.items() if lvl <= level}
    print(f"\nleak matrix, clearance {level}: {checker.outputs} outputs checked, {len(checker.leaks)} leaks")


def test_the_audit_log_records_ids_never_text(env: Path) -> None:
    ws = Workspace(env, recheck_seconds=0)
    log = env / ".audit" / "audit.jsonl"
    before = log.read_text(encoding="utf-8").count("\n") if log.exists() else 0
    search(ws, "top", "board minutes vault", clearance="restricted", user="carol")
    assert answer(ws, "top", "board minutes vault", clearance="restricted", user="carol").result.citations
    with pytest.raises(WikiragError):
        search(ws, "top", "board minutes", clearance="public", user="mallory")
    with pytest.raises(WikiragError):
        answer(ws, "top", "board minutes", clearance="public", user="mallory")
    events = [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()[before:]]
    events = [e for e in events if e.get("user") in ("carol", "mallory")]  # not the app's warm-up searches
    # one record per refusal: the composition is resolved and checked once per query
    assert [e["event"] for e in events] == ["search", "answer", "refused", "refused"]
    found, answered, refused, _ = events
    assert found["user"] == "carol" and found["clearance"] == "restricted" and found["composition"] == "top"
    assert found["wikis"] == ["alpha", "beta", "gamma", "delta"]
    assert found["passages"] and all("#" in p and "/" in p for p in found["passages"])
    assert set(answered["cited"]) <= set(answered["passages"])
    assert refused["user"] == "mallory" and "needs clearance restricted" in refused["reason"]
    text = log.read_text(encoding="utf-8")
    assert "DELTA-RESTRICTED-MARK" not in text and "board minutes" not in text  # no content, no question


def test_a_raised_level_applies_at_once_and_a_lowered_one_is_not_served_until_rebuilt(env: Path) -> None:
    ws = Workspace(env, recheck_seconds=0)
    manifest = env / "wikis" / "beta" / ".wiki.yaml"
    original = manifest.read_text()
    try:
        manifest.write_text(original.replace("sensitivity: internal", "sensitivity: confidential"))
        with pytest.raises(WikiragError):  # team's ceiling is internal: beta no longer fits under it
            search(ws, "team", "deploys", clearance="internal")
        adhoc = ws.adhoc(["alpha"], "internal")
        assert all(p.wiki == "alpha" for p in search(ws, adhoc, "deploys compost", clearance="internal").passages)
        with pytest.raises(WikiragError):
            search(ws, ws.adhoc(["beta"], "internal"), "deploys", clearance="internal")
        manifest.write_text(original.replace("sensitivity: internal", "sensitivity: public"))
        # its index was built as internal: it is not served below that level until it is rebuilt
        with pytest.raises(IndexMissing, match="rebuild it with 'wikirag build beta'"):
            search(ws, ws.adhoc(["beta"], "public"), "deploys", clearance="public")
        listed = CliRunner().invoke(cli, ["--home", str(env), "list", "--json"])
        beta = next(w for w in json.loads(listed.stdout)["wikis"] if w["name"] == "beta")
        assert beta["status"] == "incompatible"
    finally:
        manifest.write_text(original)
        os.utime(manifest)


@pytest.mark.parametrize("level", [Level.PUBLIC, Level.INTERNAL, Level.CONFIDENTIAL], ids=str)
def test_suggestions_in_errors_name_only_what_the_caller_may_see(env: Path, level: Level) -> None:
    """A typo'd composition or wiki: every list of names in the error ("available to you: …", "available:
    …") names only compositions and wikis at or below the caller's clearance — in the library, the CLI
    and the app."""
    ws = Workspace(env, recheck_seconds=0)
    import yaml

    declared = {f.stem: Level.parse(yaml.safe_load(f.read_text())["sensitivity"]) for f in (env / "rags").glob("*.yaml")}
    assert declared["top"] is Level.RESTRICTED and declared["secret"] is Level.CONFIDENTIAL
    allowed = ({n for n, lvl in declared.items() if lvl <= level}
               | {w for w in ws.wiki_names() if ws.level_of(w) <= level})
    messages: list[str] = []
    for typo in ("opne", "secrte", "tpo", "nosuch"):
        try:
            search(ws, typo, QUESTIONS[0], clearance=level)
        except WikiragError as exc:
            messages.append(str(exc))
        for command in ("query", "ask"):
            result = CliRunner().invoke(cli, ["--home", str(env), command, typo, "x", "--clearance", str(level)])
            assert result.exit_code == 1
            messages.append(result.stdout + result.stderr)
    for typo in ("gama", "delt", "alpah"):
        try:
            ws.adhoc([typo], level)
        except WikiragError as exc:
            messages.append(str(exc))
    listed = [name.strip(" .\n") for m in messages for part in re.findall(r"available(?: to you)?: ([^()\n]*)", m)
              for name in part.split(",")]
    assert listed and set(listed) - {"none", ""} <= allowed, (level, set(listed) - allowed)
    assert [m for m in messages if "did you mean" in m] == [] or all(
        n in allowed for m in messages for n in re.findall(r"did you mean '([^']+)'", m))


LEVEL_COMPOSITIONS = {Level.PUBLIC: "open", Level.INTERNAL: "team", Level.CONFIDENTIAL: "secret", Level.RESTRICTED: "top"}
LEVEL_WIKIS = {Level.PUBLIC: "alpha", Level.INTERNAL: "beta", Level.CONFIDENTIAL: "gamma", Level.RESTRICTED: "delta"}


def _kept_turn(wiki: str, composition: str, marker: str) -> AnswerResult:
    """A turn whose question, searched form, answer, heading and cited passage all carry ``marker``."""
    text = f"Notes of {wiki}: {marker} rotation."
    p = Passage(1, wiki, "page.md", 0, len(text), 1, f"{marker} heading", 1.0, text)
    r = AnswerResult(f"What does {wiki} say of {marker}?", composition, "extractive", text=f"{marker} [1].",
                     passages=[p], searched=f"{marker} searched", wikis=[wiki])
    r.citations = check_citations(r.text, [p]).citations
    return r


def _keep_conversation(ws: Workspace, store: ConversationStore, user: str, first: Level) -> str:
    """A conversation whose first turn (its title) is at ``first``, then turns at every level: asked of the
    named composition of that level and of an ad-hoc one, real answers, and turns kept as public whose
    wikis are above it now (a mirror of a confidential wiki, a broken manifest, a wiki that is gone, a
    hand-edited public composition naming a confidential wiki)."""
    cid = store.new(user, LEVEL_COMPOSITIONS[first])
    order = [first, *Level]
    for level in order:
        marker = MARKERS.get(level, "public-text")
        store.add_turn(user, cid, _kept_turn(LEVEL_WIKIS[level], LEVEL_COMPOSITIONS[level], marker), level)
        store.add_turn(user, cid, _kept_turn(LEVEL_WIKIS[level], "ad-hoc", marker), level)
    for wiki, composition, marker in (("mirror", "ad-hoc", MARKERS[Level.CONFIDENTIAL]),
                                      ("omega", "ad-hoc", MARKERS[Level.RESTRICTED]),
                                      ("vanished", "ad-hoc", MARKERS[Level.RESTRICTED]),
                                      ("gamma", "sneaky", MARKERS[Level.CONFIDENTIAL]),
                                      ("beta", "open", MARKERS[Level.INTERNAL])):
        store.add_turn(user, cid, _kept_turn(wiki, composition, marker), Level.PUBLIC)
    for level, composition in LEVEL_COMPOSITIONS.items():
        real = answer(ws, composition, QUESTIONS[1], clearance=level, user="leak-test").result
        store.add_turn(user, cid, real, level)
    return cid


@pytest.mark.parametrize("level", list(Level), ids=str)
def test_kept_conversations_show_nothing_above_the_clearance_now(env: Path, level: Level) -> None:
    """Conversations kept at every level, loaded, given to a follow-up, exported and listed at ``level``:
    no marker above it appears, and every marker at or below it does (the probe reaches them)."""
    checker = Checker()
    ws = Workspace(env, recheck_seconds=0)
    store = ConversationStore(env)
    for first in Level:
        user = f"conv-{level}-{first}"
        cid = _keep_conversation(ws, store, user, first)
        kept = store.load(ws, user, level, cid)
        where = f"conversation begun at {first}"
        checker.check(repr(kept), level, f"load() of a {where}")
        checker.check(json.dumps([t.result.to_dict() for t in kept.turns if t.result], default=str), level,
                      f"load() results of a {where}")
        checker.check(repr(kept.history()), level, f"history() of a {where}")
        checker.check(store.export_markdown(ws, user, level, cid), level, f"export of a {where}")
        checker.check(repr(store.conversations(user, ws, level)), level, f"the list of a {where}")
        # hidden: the two turns of each level above (the first one's too) and its real answer, and of the
        # turns kept as public, those whose wikis are above ``level`` now, and the broken composition's
        lying = {Level.PUBLIC: 5, Level.INTERNAL: 4, Level.CONFIDENTIAL: 3, Level.RESTRICTED: 1}[level]
        assert kept.hidden == 3 * sum(lvl > level for lvl in Level) + 2 * (first > level) + lying
        assert (kept.note is None) == (kept.hidden == 0) and all(t.result is None for t in kept.turns if t.hidden)
        visible = [t for t in kept.turns if not t.hidden]
        assert visible and all(t.level <= level for t in visible)
    assert checker.leaks == [], "\n".join(checker.leaks[:20])
    assert checker.seen == {m for lvl, m in MARKERS.items() if lvl <= level}
