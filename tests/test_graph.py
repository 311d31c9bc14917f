"""The link graph: parsing and resolving links, PageRank on a hand-checked graph, graph-aware retrieval,
incremental builds, dangling links, and clearance on links that cross wikis."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from wikirag import QueryError, Workspace, build, search, store
from wikirag import index as index_mod
from wikirag.catalog import linked_markdown, page_links
from wikirag.cli import cli
from wikirag.graph import ComposedGraph
from wikirag.links import Link, PageIndex, parse_links

from .conftest import copy_built_examples, make_wiki


@pytest.mark.parametrize("text, expected", [
    ("see [[cobalt-db]] now", [("wikilink", "cobalt-db", None, None)]),
    ("see [[cobalt-db|the database]]", [("wikilink", "cobalt-db", None, None)]),
    ("see [[cobalt-db#Backups]]", [("wikilink", "cobalt-db", "Backups", None)]),
    ("see [[cobalt-db#Backups|its backups]]", [("wikilink", "cobalt-db", "Backups", None)]),
    ("see [[services/cobalt-db]]", [("wikilink", "services/cobalt-db", None, None)]),
    ("see [[Cobalt DB.md]]", [("wikilink", "Cobalt DB.md", None, None)]),
    ("see [[#Limits]]", [("wikilink", "", "Limits", None)]),
    ("see [[cobalt-db#^block-7]]", [("wikilink", "cobalt-db", None, None)]),
    ("see [[notes#A#B]]", [("wikilink", "notes", "B", None)]),
    ("see [[security-runbooks:access-control]]", [("wikilink", "access-control", None, "security-runbooks")]),
    ("see [[handbook:ops/on-call#Paging|paging]]", [("wikilink", "ops/on-call", "Paging", "handbook")]),
    ("embed ![[diagram.png]] and ![[summary]]", [("wikilink", "summary", None, None)]),
    ("see [the cache](../services/quartz-cache.md)", [("markdown", "../services/quartz-cache.md", None, None)]),
    ("see [team](../teams/edge.md#on-call)", [("markdown", "../teams/edge.md", "on-call", None)]),
    ("see [x](<my page.md>) and [y](my%20page.md \"title\")",
     [("markdown", "my page.md", None, None), ("markdown", "my page.md", None, None)]),
    ("see [x](notes) without extension", [("markdown", "notes", None, None)]),
    ("see [site](https://example.com/a.md), [mail](mailto:a@b.c), [top](#intro)", []),
    ("an image ![chart](chart.png) and [a file](report.pdf)", []),
    ("inline `[[not-a-link]]` and ``[x](a.md)`` code", []),
    ("```markdown\n[[not-a-link]] [x](a.md)\n```\nafter [[real]]", [("wikilink", "real", None, None)]),
    ("para\n\n    [[indented-code]]\n\ntext", []),
    ("- item\n\n  ```\n  [[in-list-code]]\n  ```\n- [[in-list]]", [("wikilink", "in-list", None, None)]),
    ("~~~\n[[tilde-fence]]\n~~~", []),
])
def test_link_parsing(text: str, expected: list) -> None:
    links = parse_links(text)
    assert [(x.kind, x.target, x.anchor, x.wiki) for x in links] == expected
    for link in links:  # offsets slice the file to the link, and the line is the link's line
        assert text[link.start:link.end] == link.text
        assert link.line == text.count("\n", 0, link.start) + 1


def test_frontmatter_links_are_not_links() -> None:
    text = "---\nsee: '[[hidden]]'\n---\n# Page\n\n[[shown]]\n"
    assert [x.target for x in parse_links(text, body_start=text.index("# Page"))] == ["shown"]


PAGES = ["services/cobalt-db.md", "services/quartz-cache.md", "teams/storage.md", "notes/storage.md",
         "Cobalt DB.md", "index.md"]


@pytest.mark.parametrize("kind, target, from_path, expected", [
    ("wikilink", "cobalt-db", "projects/falcon.md", "services/cobalt-db.md"),        # by file name
    ("wikilink", "COBALT-DB", "projects/falcon.md", "services/cobalt-db.md"),        # case-insensitive
    ("wikilink", "services/cobalt-db", "x.md", "services/cobalt-db.md"),            # by path
    ("wikilink", "services/cobalt-db.md", "x.md", "services/cobalt-db.md"),
    ("wikilink", "storage", "notes/a.md", "notes/storage.md"),                      # same folder first
    ("wikilink", "storage", "projects/a.md", "notes/storage.md"),                   # else shortest, then a-z
    ("wikilink", "teams/storage", "notes/a.md", "teams/storage.md"),                # a partial path decides
    ("wikilink", "The Quartz Cache", "x.md", "services/quartz-cache.md"),           # by frontmatter title
    ("wikilink", "Cobalt DB", "x.md", "Cobalt DB.md"),                              # names with spaces
    ("wikilink", "legacy-queue", "x.md", None),                                    # dangling
    ("markdown", "../services/quartz-cache.md", "projects/falcon.md", "services/quartz-cache.md"),
    ("markdown", "quartz-cache.md", "services/cobalt-db.md", "services/quartz-cache.md"),
    ("markdown", "../teams/storage", "services/cobalt-db.md", "teams/storage.md"),  # .md optional
    ("markdown", "/teams/storage.md", "services/cobalt-db.md", "teams/storage.md"),  # from the root
    ("markdown", "quartz-cache.md", "projects/falcon.md", None),                     # relative: not there
    ("markdown", "../../outside/secret.md", "services/a.md", None),                 # never outside the root
])
def test_link_resolution(kind: str, target: str, from_path: str, expected: str | None) -> None:
    index = PageIndex(PAGES, {"services/quartz-cache.md": "The Quartz Cache"})
    assert index.resolve(Link(0, 1, 1, kind, "", target), from_path) == expected


@pytest.fixture
def chain(tmp_path: Path) -> Workspace:
    """Three one-passage pages a → b → c (a links to b, b to c)."""
    filler = "with enough words to make a passage of its own"
    make_wiki(tmp_path, "chain", {"a.md": f"# A\n\nPage a links to [[b]] {filler}.",
                                  "b.md": f"# B\n\nPage b links to [c](c.md) {filler}.",
                                  "c.md": f"# C\n\nPage c links nowhere {filler}."}, extra="layers: {graph: {}}\n")
    ws = Workspace(tmp_path, recheck_seconds=0)
    build(ws.wiki("chain"))
    return ws


def test_personalized_pagerank_on_a_hand_checked_graph(chain: Workspace) -> None:
    # nodes: passages a, b, c (0-2) and pages A, B, C (3-5). A passage leads to its page (weight 0.5)
    # and to what it links to (weight 1), normalised: a → A 1/3, a → B 2/3; b → B 1/3, b → C 2/3;
    # c → C 1. A page leads to its passage. With restart 0.5 to a, r = 0.5·s + 0.5·Pᵀr gives
    # r_a = 6/11, r_A = 1/11, r_B = 24/121, r_b = 12/121, r_C = 16/363, r_c = 8/363.
    graph = store.load(chain.wiki("chain")).graph
    composed = ComposedGraph(["chain"], [graph], np.array([0, 3]), [True], [False])
    r = composed.pagerank(np.array([0]), np.array([1.0]))
    assert r == pytest.approx([6 / 11, 12 / 121, 8 / 363, 1 / 11, 24 / 121, 16 / 363], abs=1e-6)
    # traffic over links: a → B carries r_a · 2/3 = 4/11 to b, b → C carries r_b · 2/3 = 8/121 to c
    assert composed.link_inflow(r) == pytest.approx([0, 4 / 11, 8 / 121], abs=1e-6)
    hops = composed.path([0], 2)
    assert [(h.path, h.link, h.to_path) for h in hops] == [("a.md", "[[b]]", "b.md"), ("b.md", "[c](c.md)", "c.md")]


def test_of_equally_short_paths_the_route_takes_the_one_through_what_matches(tmp_path: Path) -> None:
    """A diamond: a links to b and to c, both link to d. Breadth-first, the path to d goes through b (a's
    first link); told that c matches the question (``value``), it goes through c."""
    filler = "with enough words to make a passage of its own"
    make_wiki(tmp_path, "diamond", {"a.md": f"# A\n\nPage a links to [[b]] and to [[c]] {filler}.",
                                    "b.md": f"# B\n\nPage b links to [[d]] {filler}.",
                                    "c.md": f"# C\n\nPage c links to [[d]] {filler}.",
                                    "d.md": f"# D\n\nPage d links nowhere {filler}."}, extra="layers: {graph: {}}\n")
    ws = Workspace(tmp_path, recheck_seconds=0)
    build(ws.wiki("diamond"))
    graph = store.load(ws.wiki("diamond")).graph
    composed = ComposedGraph(["diamond"], [graph], np.array([0, 4]), [True], [False])
    assert [h.path for h, _ in composed.route([0], 3)] == ["a.md", "b.md"]
    assert [h.path for h, _ in composed.route([0], 3, value=lambda node: 1.0 if node == 2 else 0.0)] == [
        "a.md", "c.md"]


def _catalogue(home: Path, graph: bool = True) -> Workspace:
    """A product page links to its database's Backups section; eight decoy services also have backups."""
    files = {"projects/falcon.md": "# Project Falcon\n\nFalcon is the web storefront. Orders live in its main "
                                   "database, [[cobalt]]; restores use [[cobalt#Backups|its backups]].\n"}
    for i in range(8):
        files[f"services/a{i}.md"] = (f"# Service A{i}\n\nA{i} is one more service of the catalogue.\n\n## Backups\n\n"
                                      f"Backups of the A{i} database run nightly at 0{i}:00 UTC.\n")
    files["services/cobalt.md"] = ("# Service Cobalt\n\nCobalt is the shared PostgreSQL cluster.\n\n## Backups\n\n"
                                   "Backups of the Cobalt database run nightly at 02:30 UTC.\n")
    make_wiki(home, "catalogue", files, sensitivity="internal", extra="layers: {graph: {}}\n" if graph else "")
    (home / "rags").mkdir(exist_ok=True)
    (home / "rags" / "cat.yaml").write_text("sensitivity: internal\nwikis: [catalogue]\nk: 3\n")
    ws = Workspace(home, recheck_seconds=0)
    build(ws.wiki("catalogue"))
    return ws


QUESTION = "When does the backup of the Falcon database run?"


def test_the_graph_layer_finds_the_linked_answer_that_bm25_misses(tmp_path: Path) -> None:
    ws = _catalogue(tmp_path)
    plain = search(ws, "cat", QUESTION, clearance="internal", layers=("bm25",))
    assert "services/cobalt.md" not in [p.path for p in plain.passages]
    found = search(ws, "cat", QUESTION, clearance="internal")
    # linked from the top hit and matching the question: it rises above the unlinked decoys
    assert [p.path for p in found.passages[:2]] == ["services/cobalt.md", "projects/falcon.md"]
    cobalt = found.passages[0]
    assert cobalt.heading == "Service Cobalt > Backups"
    assert {c.layer for c in cobalt.contributions} == {"bm25", "graph"}
    assert [(h.path, h.link, h.to_path) for h in cobalt.via] == [
        ("projects/falcon.md", "[[cobalt#Backups|its backups]]", "services/cobalt.md")]
    # the same through the CLI: --json marks the passage and the link followed
    out = CliRunner().invoke(cli, ["--home", str(tmp_path), "query", "cat", QUESTION, "--json",
                                   "--clearance", "internal"])
    assert out.exit_code == 0, out.output
    rows = {p["path"]: p for p in json.loads(out.stdout)}
    assert rows["services/cobalt.md"]["via"][0]["link"] == "[[cobalt#Backups|its backups]]"
    assert rows["projects/falcon.md"]["via"] == []
    text = CliRunner().invoke(cli, ["--home", str(tmp_path), "query", "cat", QUESTION, "--clearance", "internal"])
    assert "via [[cobalt#Backups|its backups]] in catalogue/projects/falcon.md:3" in text.stdout


def test_the_graph_layer_is_opt_in_and_needs_no_rebuild(tmp_path: Path) -> None:
    ws = _catalogue(tmp_path, graph=False)
    result = search(ws, "cat", QUESTION, clearance="internal")
    assert all(c.layer == "bm25" for p in result.passages for c in p.contributions)
    manifest = tmp_path / "wikis" / "catalogue" / ".wiki.yaml"
    manifest.write_text(manifest.read_text() + "layers: {graph: {}}\n")
    assert index_mod.status(ws.wiki("catalogue")).state == "fresh"  # the links are in every build
    result = search(ws, "cat", QUESTION, clearance="internal")
    assert "services/cobalt.md" in [p.path for p in result.passages]
    with pytest.raises(QueryError, match="add bm25 or dense"):
        search(ws, "cat", QUESTION, clearance="internal", layers=("graph",))


def test_links_are_incremental_and_resolve_anew(tmp_path: Path) -> None:
    ws = _catalogue(tmp_path)
    wiki = ws.wiki("catalogue")
    falcon = tmp_path / "wikis" / "catalogue" / "projects" / "falcon.md"
    falcon.write_text(falcon.read_text() + "\nIt also uses [[quartz]], planned.\n")
    report = build(wiki)
    assert report.rechunked == 1  # only the edited page was read again
    graph = store.load(wiki).graph
    assert [(p, x.target) for p, x in graph.dangling()] == [("projects/falcon.md", "quartz")]
    assert index_mod.status(wiki).dangling == 1
    assert len(graph.backlinks("services/cobalt.md")) == 2
    (tmp_path / "wikis" / "catalogue" / "services" / "quartz.md").write_text("# Quartz\n\nQuartz is the cache tier of the whole catalogue.\n")
    assert build(wiki).rechunked == 1  # falcon.md is not re-read, yet its link now resolves
    graph = store.load(wiki).graph
    assert graph.dangling() == []
    assert [p for p, _ in graph.backlinks("services/quartz.md")] == ["projects/falcon.md"]


def test_check_reports_dangling_links(tmp_path: Path) -> None:
    make_wiki(tmp_path, "w", {"a.md": "# A\n\nA page that links to [[missing-page]] and [[other:thing]] and [[w2:b]].\n"})
    make_wiki(tmp_path, "w2", {"b.md": "# B\n\nA page in the second wiki, long enough to be a passage.\n"})
    ws = Workspace(tmp_path)
    build(ws.wiki("w"))
    build(ws.wiki("w2"))
    out = CliRunner().invoke(cli, ["--home", str(tmp_path), "check"])
    assert out.exit_code == 0  # dangling links are notes, not configuration errors
    assert "wiki 'w': a.md:3: link [[missing-page]] is dangling: no page of the wiki has that name" in out.stderr
    assert "link [[other:thing]] is dangling: there is no wiki 'other'" in out.stderr
    assert "[[w2:b]]" not in out.stderr  # resolves into w2


SECRET = "VAULT-CONFIDENTIAL-MARK"


@pytest.fixture
def two_levels(tmp_path: Path) -> Workspace:
    """A public wiki whose page links into a confidential one (and the confidential one links back)."""
    filler = "These words make the passage long enough to keep."
    make_wiki(tmp_path, "pub", {"guide.md": f"# Guide\n\nThe opening hours guide. For the combination see "
                                            f"[[vault:combination]]. {filler}\n"},
              extra="layers: {graph: {}}\n")
    make_wiki(tmp_path, "vault", {"combination.md": f"# Combination\n\nThe safe combination is {SECRET}. "
                                                    f"It is kept as described in [[pub:guide]]. {filler}\n"},
              sensitivity="confidential", extra="layers: {graph: {}}\n")
    (tmp_path / "rags").mkdir()
    (tmp_path / "rags" / "open.yaml").write_text("sensitivity: public\nwikis: [pub]\n")
    (tmp_path / "rags" / "both.yaml").write_text("sensitivity: confidential\nwikis: [pub, vault]\n")
    ws = Workspace(tmp_path, recheck_seconds=0)
    build(ws.wiki("pub"))
    build(ws.wiki("vault"))
    return ws


def test_cross_wiki_links_are_followed_only_inside_the_composition_and_clearance(two_levels: Workspace) -> None:
    ws, question = two_levels, "opening hours"
    for clearance in ("public", "internal", "confidential"):  # a composition without the vault never reaches it
        result = search(ws, "open", question, clearance=clearance)
        assert result.passages and all(p.wiki == "pub" for p in result.passages)
        assert SECRET not in json.dumps([p.to_dict() for p in result.passages])
        adhoc = search(ws, ws.adhoc(["pub"], clearance), question, clearance=clearance)
        assert all(p.wiki == "pub" for p in adhoc.passages)
    both = search(ws, "both", question, clearance="confidential", k=5)  # inside the composition: followed
    vault = next(p for p in both.passages if p.wiki == "vault")
    assert SECRET in vault.text and any(c.layer == "graph" for c in vault.contributions)
    assert [(h.wiki, h.to_wiki, h.to_path) for h in vault.via] == [("pub", "vault", "combination.md")]


def test_portal_links_and_backlinks_respect_clearance(two_levels: Workspace) -> None:
    ws = two_levels
    public = page_links(ws, "pub", "guide.md", "public")
    assert [(x.to_wiki, x.to_path) for x in public.links] == [("vault", None)]  # shown, but not resolved
    assert public.backlinks == []  # the vault's link back is above a public user
    confidential = page_links(ws, "pub", "guide.md", "confidential")
    assert [(x.to_wiki, x.to_path) for x in confidential.links] == [("vault", "combination.md")]
    assert [(x.to_wiki, x.to_path) for x in confidential.backlinks] == [("vault", "combination.md")]
    everything = json.dumps([x.__dict__ for x in public.links + public.backlinks])
    assert SECRET not in everything and "combination.md" not in everything


@pytest.mark.parametrize("built", [True, False])
def test_wikilinks_are_shown_as_links_to_pages_the_caller_may_see(tmp_path: Path, built: bool) -> None:
    home = tmp_path / "ws"
    make_wiki(home, "brew", {"methods/v60.md": "# V60\n\nPour in circles for three minutes in all.\n",
                             "guide.md": "# Guide\n\nSee [[v60|V60 recipe]], [[v60#Grind]], [the V60](methods/v60.md), "
                                         "[[nosuch]], [[ops:runbook|the runbook]], [web](https://x.org) and `[[v60]]`.\n"})
    make_wiki(home, "ops", {"runbook.md": "# Runbook\n\nRestart the broker, then drain the queue slowly.\n"},
              sensitivity="confidential")
    ws = Workspace(home, recheck_seconds=0)
    if built:
        build(ws.wiki("brew"))
        build(ws.wiki("ops"))
    text = (home / "wikis/brew/guide.md").read_text()
    public = linked_markdown(ws, "brew", "guide.md", text, "public")
    link = "(portal?wiki=brew&path=methods%2Fv60.md)"
    assert f"See [V60 recipe]{link}, [v60 › Grind]{link}, [the V60]{link}, nosuch, the runbook, " in public
    assert "[web](https://x.org)" in public and "`[[v60]]`" in public  # links elsewhere and code as written
    assert "ops" not in public and "runbook.md" not in public  # a wiki above the clearance: its plain text only
    confidential = linked_markdown(ws, "brew", "guide.md", text, "confidential")
    assert "[the runbook](portal?wiki=ops&path=runbook.md)" in confidential
    assert linked_markdown(ws, "brew", "guide.md", "no links here", "public") == "no links here"


def test_an_answer_shows_the_hop_and_cites_the_link_it_followed(tmp_path: Path) -> None:
    from wikirag.answers import answer

    ws = _catalogue(tmp_path)
    found = search(ws, "cat", QUESTION, clearance="internal", k=1)
    assert [p.path for p in found.passages] == ["services/cobalt.md"]
    # the passage holding the link it was reached through is returned beside it, to be cited
    assert [(p.path, p.rank) for p in found.linking] == [("projects/falcon.md", 0)]
    result = answer(ws, "cat", QUESTION, clearance="internal", k=1, model="extractive").result
    assert [p.path for p in result.passages] == ["services/cobalt.md", "projects/falcon.md"]
    # the sentence holding the link that was followed, then what the page it leads to says
    assert result.text.startswith("Project Falcon → Service Cobalt: Orders live in its main database, cobalt; "
                                  "restores use its backups [2]")
    assert "[2]; and Service Cobalt says: Backups of the Cobalt database run nightly at 02:30 UTC. [1]" in result.text
    assert "[[" not in result.text  # the link's markup is not quoted
    assert {c.n for c in result.citations} == {1, 2}
    assert not result.invalid_citations and not result.unsupported_citations
    # ask --json: each citation says which links led to its passage
    out = CliRunner().invoke(cli, ["--home", str(tmp_path), "ask", "cat", QUESTION, "--json", "-k", "1",
                                   "--clearance", "internal", "--model", "extractive"])
    assert out.exit_code == 0, out.output
    cited = {c["path"]: c for c in json.loads(out.stdout.splitlines()[0])["citations"]}
    assert cited["services/cobalt.md"]["via"] == [
        {"wiki": "catalogue", "path": "projects/falcon.md", "line": 3, "link": "[[cobalt#Backups|its backups]]",
         "to_wiki": "catalogue", "to_path": "services/cobalt.md"}]
    assert cited["projects/falcon.md"]["via"] == []
    # a question that names nothing the answer's page lacks is answered without the hop
    direct = answer(ws, "cat", "When do backups of the Cobalt database run?", clearance="internal",
                    model="extractive").result
    assert "→" not in direct.text and "02:30 UTC" in direct.text


def test_a_page_the_question_finds_directly_is_no_hop_from_a_lower_page_linking_to_it(tmp_path: Path) -> None:
    """Falcon's page links to Cobalt's. Asked about Falcon, Cobalt's Backups is reached over that link (via);
    asked about Cobalt itself, Cobalt's passages rank above Falcon's, and none is labelled as reached
    through Falcon's link although the graph list still holds them."""
    ws = _catalogue(tmp_path)
    direct = search(ws, "cat", "Is Cobalt the shared PostgreSQL cluster with nightly backups?", clearance="internal")
    assert direct.passages[0].path == "services/cobalt.md"
    cobalt = [p for p in direct.passages if p.path == "services/cobalt.md"]
    assert cobalt and all(p.via == () for p in cobalt)
    assert any(x.layer == "graph" for p in cobalt for x in p.contributions)  # reached, but not through a hop
    assert not direct.linking
    hop = search(ws, "cat", QUESTION, clearance="internal")
    assert [h.path for h in hop.passages[0].via] == ["projects/falcon.md"]


def test_the_linked_page_gives_the_section_that_answers_not_the_one_it_starts_with(tmp_path: Path) -> None:
    """A page link gives every passage of the page the same link traffic; the question chooses among them.
    Egret links to Tufa's page (not a section); Tufa's Limits answers, and says neither "Egret" nor the
    question's "largest"; two other services have Limits sections that Egret does not link to."""
    files = {"projects/egret.md": "# Project Egret\n\nEgret is the buying team's catalogue tool. Product photos "
                                  "are resized by [[tufa|Tufa]] before they go live.\n"}
    for name in ("slate", "basalt"):
        files[f"services/{name}.md"] = (f"# {name.title()}\n\n{name.title()} stores other things.\n\n## Limits\n\n"
                                        f"Objects up to 5 GB per upload; photo exports are split above that.\n")
    files["services/tufa.md"] = ("# Tufa Images\n\nTufa resizes and crops pictures for the shop.\n\n## Backups\n\n"
                                 "Originals are copied nightly to object storage.\n\n## On-call\n\n"
                                 "Owned by the Edge team in business hours.\n\n## Limits\n\n"
                                 "Source images up to 40 MB; larger uploads are refused.\n")
    make_wiki(tmp_path, "catalogue", files, sensitivity="internal", extra="layers: {graph: {}}\n")
    (tmp_path / "rags").mkdir(exist_ok=True)
    (tmp_path / "rags" / "cat.yaml").write_text("sensitivity: internal\nwikis: [catalogue]\n")
    ws = Workspace(tmp_path, recheck_seconds=0)
    build(ws.wiki("catalogue"))
    question = "What is the largest product photo that Egret can upload?"
    found = search(ws, "cat", question, clearance="internal", k=3, layers=("bm25", "graph"))
    tufa = [p.heading for p in found.passages if p.path == "services/tufa.md"]
    assert tufa[:1] == ["Tufa Images > Limits"], [(p.path, p.heading) for p in found.passages]
    limits = next(p for p in found.passages if p.heading == "Tufa Images > Limits")
    assert [h.path for h in limits.via] == ["projects/egret.md"]
    # first in the graph layer's own list (by link traffic alone it was 4th, after the page's other sections)
    assert [(x.layer, x.rank) for x in limits.contributions if x.layer == "graph"] == [("graph", 1)]


def test_of_a_linked_page_the_passage_with_what_the_question_asks_for_comes_first(tmp_path: Path) -> None:
    """A question that asks for a size ("the biggest …") and shares no word with the section that answers:
    of the linked page's passages, the one that holds a size takes the page's best place, in the graph
    layer's list and in the results; a question that asks for no kind of value leaves the order alone."""
    files = {"projects/egret.md": "# Project Egret\n\nEgret scores every order the moment it arrives from the "
                                  "[[basalt|real-time feed]] of order events.\n",
             "services/basalt.md": "# Basalt Queue\n\nBasalt carries order events between services.\n\n## Region\n\n"
                                   "Hosted in eu-central-1, with a standby cluster.\n\n## Retention\n\n"
                                   "Kept for 7 days, so consumers can replay a week.\n\n## Limits\n\n"
                                   "256 KB maximum message size; put larger payloads in object storage.\n"}
    make_wiki(tmp_path, "catalogue", files, sensitivity="internal", extra="layers: {graph: {}}\n")
    (tmp_path / "rags").mkdir(exist_ok=True)
    (tmp_path / "rags" / "cat.yaml").write_text("sensitivity: internal\nwikis: [catalogue]\n")
    ws = Workspace(tmp_path, recheck_seconds=0)
    build(ws.wiki("catalogue"))

    def basalt(question: str) -> list:
        found = search(ws, "cat", question, clearance="internal", k=3, layers=("bm25", "graph"), audit_event=None)
        return [(p.heading.split(" > ")[-1], [x.rank for x in p.contributions if x.layer == "graph"])
                for p in found.passages if p.path == "services/basalt.md"]

    got = basalt("What is the biggest single event Egret can take from that feed?")
    assert got[:1] == [("Limits", [1])], got
    plain = basalt("What does Egret take from that feed?")  # asks for no size: Limits is no better than the rest
    assert plain and plain[0][0] != "Limits", plain


def test_the_offline_answer_reads_a_linked_sentence_after_the_link_that_leads_to_it(
        built_examples: Path, tmp_path: Path) -> None:
    """Two questions of bench/multihop_hard.jsonl over the bundled catalogue. Each describes Falcon's page
    ("the store holding its sessions and rendered fragments") and asks for a limit only the page it links
    to has. By itself, the sentence holding the link matches such a question best (the answer led with
    it); read after that link, the linked page's sentence does better, and the answer states the hop,
    then the limit, citing both pages."""
    from wikirag.answers import answer

    ws = Workspace(copy_built_examples(built_examples, tmp_path / "ws"))
    for question, page, fact in [
            (("What is the biggest value Falcon can put into the store holding its sessions and rendered fragments "
              "before it is turned away?"), "services/quartz-cache.md", "Values larger than 1 MB are rejected."),
            (("After how many seconds does the entry point that every Falcon browser request passes through give up "
              "waiting on the backend?"), "services/jasper-gateway.md", "29 seconds")]:
        result = answer(ws, "systems", question, clearance="internal", model="extractive").result
        assert result.text.startswith("Project Falcon → "), result.text
        assert fact in result.text.split(" says: ", 1)[1].split("\n")[0], result.text  # the fact leads, after the hop
        cited = {c.passage.path for c in result.citations}
        assert {"projects/falcon.md", page} <= cited


def test_a_hop_is_led_back_to_the_page_the_question_names_through_the_page_it_describes(tmp_path: Path) -> None:
    """Two hops: Avocet's page links to Topaz's, whose On-call section links to the Payments team; Cobalt's
    On-call links there too. Asked for the city of the team owning "the card service behind Avocet's
    renewals", the People section is reached from Avocet through Topaz: not from Topaz alone (the nearest
    page holding a question word, "card"), which left out the page the question names, nor through
    Cobalt, as long a path but through a page that matches nothing of the question."""
    files = {
        "projects/avocet.md": "# Project Avocet\n\nAvocet renews subscriptions every month. Card payments for "
                              "each renewal go through [[topaz|Topaz]].\n",
        "services/cobalt.md": "# Cobalt\n\nCobalt stores orders and baskets.\n\n## On-call\n\n"
                              "Run by the [[payments|Payments team]].\n",
        "services/topaz.md": "# Topaz\n\nTopaz wraps the card providers behind one API.\n\n## On-call\n\n"
                             "Run by the [[payments|Payments team]].\n",
        "teams/payments.md": "# Payments team\n\nThe team looks after money flows.\n\n## People\n\n"
                             "Six engineers in the Dublin office.\n",
    }
    make_wiki(tmp_path, "catalogue", files, sensitivity="internal", extra="layers: {graph: {}}\n")
    (tmp_path / "rags").mkdir(exist_ok=True)
    (tmp_path / "rags" / "cat.yaml").write_text("sensitivity: internal\nwikis: [catalogue]\n")
    ws = Workspace(tmp_path, recheck_seconds=0)
    build(ws.wiki("catalogue"))
    found = search(ws, "cat", "In which city do the engineers running the card service behind Avocet's renewals "
                   "work?", clearance="internal", k=8, layers=("bm25", "graph"))
    people = next(p for p in found.passages if p.heading == "Payments team > People")
    assert [(h.path, h.to_path) for h in people.via] == [("projects/avocet.md", "services/topaz.md"),
                                                         ("services/topaz.md", "teams/payments.md")]


def test_a_two_hop_answer_states_both_links_from_the_page_the_question_names(
        built_examples: Path, tmp_path: Path) -> None:
    """bench/multihop_hard.jsonl's "In which city do the engineers who own the card-charging service behind
    Avocet's renewals work?" over the bundled catalogue: the answer is on the Payments team's page, two links
    from Avocet's (Avocet → Topaz Payments → Payments team). The answer states both links, cites the three
    pages, and leads with the office, not with a sentence of Topaz's page."""
    from wikirag.answers import answer

    ws = Workspace(copy_built_examples(built_examples, tmp_path / "ws"))
    question = "In which city do the engineers who own the card-charging service behind Avocet's renewals work?"
    result = answer(ws, "systems", question, clearance="internal", model="extractive").result
    assert result.text.startswith("Project Avocet → Topaz Payments → Payments team: "), result.text
    assert "Dublin office" in result.text.split(" says: ", 1)[1].split("\n")[0], result.text
    cited = {c.passage.path for c in result.citations}
    assert {"projects/avocet.md", "services/topaz-payments.md", "teams/payments.md"} <= cited
    people = next(c.passage for c in result.citations if c.passage.path == "teams/payments.md")
    assert [h.path for h in people.via] == ["projects/avocet.md", "services/topaz-payments.md"]
