"""The link graph: a wiki's pages and passages connected by its own links, and graph-aware retrieval.

**Built with every index, at no model cost.** A build parses each page's links (:mod:`wikirag.links`)
and saves them, resolved to pages where they point inside the wiki, as ``graph.json`` beside the BM25
files: part of the build, so it is checksummed, atomic and incremental like them (the links of an
unchanged page are reused, never re-parsed). Zero LLM calls. The portal shows a page's links and
backlinks from it, and ``wikirag check`` lists the dangling ones, for every wiki.

**Used at query time by wikis that opt in** (``layers: {graph: {}}``; no rebuild needed). The nodes
are passages and pages: a passage points to each page (or, with ``#anchor``, each section's passages)
it links to and to its own page; a page points to its passages; with ``tags: true`` pages also meet
through their shared tags. The fused top ``seeds`` hits of a query seed a personalized PageRank over
the graph of the composition's wikis (restart probability :data:`RESTART`, seed ``i`` weighted
``1/i``). Each passage then scores by the walk's traffic that arrives at it over links from other
pages (:meth:`ComposedGraph.link_inflow`: restarts and moves within a page do not count); among the
passages it reaches, the question chooses (:func:`wikirag.retrieval._graph_rows`: traffic rank and
match rank fused), and the best of them give each wiki one more ranked list — the ``graph`` layer — for
the same fusion as its BM25 and dense lists, at the same weight. An ``#anchor`` link leads to its
section's passages and, at :data:`ANCHOR_PAGE`, to its whole page. (Scoring by PageRank mass instead,
leaving out the seeds, or the traffic times the match all measured worse on the multi-hop check: see
the README.) Cross-wiki links (``[[other-wiki:page]]``)
are followed only into wikis of the same composition, which all sit within the caller's clearance;
any other target is a dead end.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .links import Link, PageIndex, parse_links, slug
from .page import Page
from .passage import Chunk, Hop

GRAPH_FILE = "graph.json"
GRAPH_VERSION = 1
RESTART = 0.5        # personalized PageRank: probability of jumping back to the seeds at each step
ITERATIONS = 30      # power iterations (converged to < 1e-6 on the example and benchmark graphs)
SIBLING_WEIGHT = 0.5  # a passage's edge to its own page, relative to one link
ANCHOR_PAGE = 1.0     # an ``#anchor`` link's edge to the whole page, beside those to its section
TAG_WEIGHT = 0.5      # a page's edge to each of its tags (``tags: true``), relative to one link


@dataclass(frozen=True)
class PageLinks:
    """What the graph keeps of one page: its title, tags and links (in file order)."""

    title: str | None
    tags: tuple[str, ...]
    links: tuple[Link, ...]


def page_links(text: str, page: Page) -> PageLinks:
    """Parse one page's links (its frontmatter gives the title and tags)."""
    title = page.frontmatter.get("title")
    return PageLinks(title if isinstance(title, str) else None, tuple(sorted(page.tags)),
                     tuple(parse_links(text, page.body_start)))


def resolve(pages: dict[str, PageLinks], known: Sequence[str] = ()) -> dict[str, PageLinks]:
    """Resolve every in-wiki link of ``pages`` (``known``: other pages that exist but are not indexed)."""
    index = PageIndex([*pages, *known], {p: v.title for p, v in pages.items()})
    return {p: PageLinks(v.title, v.tags, tuple(index.resolve_all(list(v.links), p))) for p, v in pages.items()}


def save(folder: Path, pages: dict[str, PageLinks], known: Sequence[str]) -> dict:
    """Write ``graph.json`` into a build folder; return counts for the index manifest."""
    data = {"version": GRAPH_VERSION, "known": sorted(known),
            "pages": {p: {"title": v.title, "tags": list(v.tags), "links": [link.to_row() for link in v.links]}
                      for p, v in sorted(pages.items())}}
    (folder / GRAPH_FILE).write_text(json.dumps(data, ensure_ascii=False, separators=(",", ":")), encoding="utf-8")
    links = [link for v in pages.values() for link in v.links]
    return {"pages": len(pages), "links": len(links), "cross_wiki": sum(1 for x in links if x.wiki),
            "dangling": sum(1 for x in links if not x.wiki and x.to is None)}


def load_pages(folder: Path) -> tuple[dict[str, PageLinks], list[str]]:
    """The pages and known paths saved in a build folder (empty if it has no graph)."""
    path = folder / GRAPH_FILE
    if not path.exists():
        return {}, []
    data = json.loads(path.read_text(encoding="utf-8"))
    pages = {p: PageLinks(v["title"], tuple(v["tags"]), tuple(Link.from_row(r) for r in v["links"]))
             for p, v in data["pages"].items()}
    return pages, data.get("known", [])


class LinkGraph:
    """One build's link graph in memory, aligned with its passages. Read-only."""

    def __init__(self, pages: dict[str, PageLinks], known: Sequence[str], chunks: Sequence[Chunk]):
        self.pages = pages
        self.known = list(known)
        self.paths: list[str] = []
        self.page_of_chunk = np.empty(len(chunks), dtype=np.int64)
        by_path: dict[str, list[int]] = {}
        for i, c in enumerate(chunks):
            by_path.setdefault(c.path, []).append(i)
        self.page_id = {p: n for n, p in enumerate(sorted(by_path))}
        self.paths = sorted(by_path)
        self.chunks_of = [by_path[p] for p in self.paths]
        for n, ids in enumerate(self.chunks_of):
            self.page_of_chunk[ids] = n
        self._chunks = chunks
        self._index: PageIndex | None = None

    def page_index(self) -> PageIndex:
        """Resolves targets of links from other wikis into this one."""
        if self._index is None:
            self._index = PageIndex([*self.pages, *self.known], {p: v.title for p, v in self.pages.items()})
        return self._index

    def chunk_at(self, path: str, offset: int) -> int | None:
        """The passage of ``path`` holding ``offset`` (else the nearest one before it, else its first)."""
        page = self.page_id.get(path)
        if page is None:
            return None
        ids = self.chunks_of[page]
        before = [i for i in ids if self._chunks[i].start <= offset]
        inside = [i for i in before if offset < self._chunks[i].end]
        return (inside or before or ids)[-1 if (inside or before) else 0]

    def section(self, path: str, anchor: str | None) -> list[int]:
        """The passages of ``path`` under heading ``anchor`` (all of the page's if None or not found)."""
        page = self.page_id.get(path)
        if page is None:
            return []
        ids = self.chunks_of[page]
        if anchor:
            wanted = slug(anchor)
            hits = [i for i in ids if wanted in [slug(h) for h in self._chunks[i].heading.split(" > ")[-1:]]]
            if hits:
                return hits
        return ids

    def outgoing(self, path: str) -> list[Link]:
        entry = self.pages.get(path)
        return list(entry.links) if entry else []

    def backlinks(self, path: str) -> list[tuple[str, Link]]:
        """``(from path, link)`` for every link of this wiki into ``path``."""
        return [(p, link) for p, v in self.pages.items() for link in v.links
                if link.wiki is None and link.to == path and p != path]

    def dangling(self) -> list[tuple[str, Link]]:
        """In-wiki links that name no page."""
        return [(p, link) for p, v in sorted(self.pages.items()) for link in v.links
                if link.wiki is None and link.to is None]


class ComposedGraph:
    """The link graphs of one query's wikis joined into one (node ids: passages first, in the merged
    BM25 order, then pages, then tags). Edges leave only from wikis that opted in."""

    def __init__(self, names: Sequence[str], graphs: Sequence[LinkGraph], offsets: np.ndarray,
                 enabled: Sequence[bool], tags: Sequence[bool]):
        self.names, self.graphs, self.offsets = tuple(names), list(graphs), offsets
        n_chunks = int(offsets[-1])
        self.page_base = np.cumsum([n_chunks] + [len(g.paths) for g in graphs])
        src: list[int] = []
        dst: list[int] = []
        weight: list[float] = []
        self.link_of_edge: dict[int, tuple[int, str, Link]] = {}  # edge → (wiki, from path, link)
        where = {name: w for w, name in enumerate(names)}
        tag_nodes: dict[str, int] = {}
        tag_edges: list[tuple[int, str]] = []

        def add(a: int, b: int, wt: float, link: tuple[int, str, Link] | None = None) -> None:
            if link is not None:
                self.link_of_edge[len(src)] = link
            src.append(a)
            dst.append(b)
            weight.append(wt)

        for w, g in enumerate(graphs):
            base, pbase = int(offsets[w]), int(self.page_base[w])
            for page, ids in enumerate(g.chunks_of):  # a page leads to its passages
                for i in ids:
                    add(pbase + page, base + i, 1.0 / len(ids))
            if not enabled[w]:
                continue
            for i, page in enumerate(g.page_of_chunk.tolist()):
                add(base + i, pbase + page, SIBLING_WEIGHT)
            for path, entry in g.pages.items():
                for link in entry.links:
                    target_w = where.get(link.wiki, -1) if link.wiki else w
                    if target_w < 0:
                        continue  # another wiki outside this composition: a dead end
                    target = graphs[target_w]
                    to = link.to if not link.wiki else target.page_index().resolve(link, "")
                    source = g.chunk_at(path, link.start)
                    if to is None or source is None or target.page_id.get(to) is None:
                        continue
                    if target_w == w and to == path:
                        continue  # a link within the page leads nowhere new
                    if link.anchor and target.section(to, link.anchor) != target.chunks_of[target.page_id[to]]:
                        for i in target.section(to, link.anchor):
                            add(base + source, int(offsets[target_w]) + i, 1.0, (w, path, link))
                        if ANCHOR_PAGE:  # the link names a section; the question may be on another one
                            add(base + source, int(self.page_base[target_w]) + target.page_id[to], ANCHOR_PAGE,
                                (w, path, link))
                    else:
                        add(base + source, int(self.page_base[target_w]) + target.page_id[to], 1.0, (w, path, link))
            if tags[w]:
                for path, entry in g.pages.items():
                    if path in g.page_id:
                        for tag in entry.tags:
                            tag_edges.append((pbase + g.page_id[path], tag))
        n = int(self.page_base[-1])
        for page, tag in tag_edges:
            node = tag_nodes.setdefault(tag, n + len(tag_nodes))
            add(page, node, TAG_WEIGHT)
        members: dict[int, list[int]] = {}
        for page, tag in tag_edges:
            members.setdefault(tag_nodes[tag], []).append(page)
        self.tag_edges_from = len(src)
        for node, pages in members.items():
            for page in pages:
                add(node, page, 1.0 / len(pages))
        self.size = n + len(tag_nodes)
        self.src = np.array(src, dtype=np.int64)
        self.dst = np.array(dst, dtype=np.int64)
        out = np.bincount(self.src, weights=weight, minlength=self.size) if src else np.zeros(self.size)
        self.prob = np.array(weight, dtype=np.float64) / np.where(out[self.src] > 0, out[self.src], 1.0) if src \
            else np.zeros(0)
        self.dangling = out == 0
        # the page node of each passage node
        self.page_node = np.concatenate([self.page_base[w] + g.page_of_chunk for w, g in enumerate(graphs)]) \
            if graphs else np.empty(0, dtype=np.int64)
        # edges that cross from one page to another: links (and shared tags)
        self.crossing = np.array(sorted(self.link_of_edge) + list(range(self.tag_edges_from, len(src))), dtype=np.int64)
        self.chunks_per_page = np.bincount(self.page_node, minlength=self.size).astype(np.float64)
        self._adjacency: list[list[int]] | None = None

    def pagerank(self, seeds: np.ndarray, weights: np.ndarray) -> np.ndarray:
        """Personalized PageRank from ``seeds`` (node ids) with restart weights ``weights``."""
        s = np.zeros(self.size)
        np.add.at(s, seeds, weights / weights.sum())
        r = s.copy()
        for _ in range(ITERATIONS):
            flow = np.bincount(self.dst, weights=r[self.src] * self.prob, minlength=self.size)
            new = RESTART * s + (1 - RESTART) * (flow + r[self.dangling].sum() * s)
            done = np.abs(new - r).sum() < 1e-9
            r = new
            if done:
                break
        return r

    def link_inflow(self, r: np.ndarray) -> np.ndarray:
        """Per passage node: the walk's traffic ``r`` that arrives over links from other pages — directly
        (an ``#anchor`` link), or through its page, shared by the page's passages. Restarts and moves
        within a page do not count, so a seed scores only by what links lead to it."""
        e = self.crossing
        flow = np.bincount(self.dst[e], weights=r[self.src[e]] * self.prob[e], minlength=self.size)
        n = len(self.page_node)
        per_page = flow[self.page_node] / np.maximum(self.chunks_per_page[self.page_node], 1.0)
        return flow[:n] + per_page

    def path(self, seeds: Sequence[int], target: int, max_steps: int = 12) -> list[Hop]:
        """The links on a shortest path to passage ``target`` from a seed on another page (breadth-first;
        empty if none)."""
        return [hop for hop, _ in self.route(seeds, target, max_steps)]

    def route(self, seeds: Sequence[int], target: int, max_steps: int = 12,
              value: Callable[[int], float] | None = None) -> list[tuple[Hop, int]]:
        """:meth:`path` with, for each link, the passage node that holds it (where a citation of the hop
        points). Of the shortest paths, the one whose nodes have the most ``value`` in all (the question's
        match of each passage: "the store holding Falcon's sessions" goes Falcon → Quartz → Storage team,
        not Falcon → Cobalt → Storage team, though both are two links); without ``value``, the first found
        breadth-first, seeds in their order."""
        if self._adjacency is None:
            adjacency: list[list[int]] = [[] for _ in range(self.size)]
            for e, a in enumerate(self.src.tolist()):
                adjacency[a].append(e)
            self._adjacency = adjacency
        worth = value or (lambda node: 0.0)
        # start from the seeds on other pages: a path into another page must cross a link (or tag)
        parent: dict[int, int] = {s: -1 for s in seeds if self.page_node[s] != self.page_node[target]}
        gained = {s: worth(s) for s in parent}
        # level by level, so that each node's parent is the best of the previous level's (a node is given a
        # parent once, from an earlier level: the parent links never form a cycle)
        level, steps = list(parent), 0
        while level and target not in parent and steps < max_steps:
            found: dict[int, int] = {}
            for node in level:
                for e in self._adjacency[node]:
                    nxt = int(self.dst[e])
                    if nxt not in parent and (nxt not in found or gained[node] > gained[int(self.src[found[nxt]])]):
                        found[nxt] = e
            for nxt, e in found.items():
                parent[nxt] = e
                gained[nxt] = gained[int(self.src[e])] + worth(nxt)
            level, steps = list(found), steps + 1
        if target not in parent:
            return []
        hops, node = [], target
        while parent[node] != -1:
            e = parent[node]
            if e in self.link_of_edge:
                w, path, link = self.link_of_edge[e]
                to_wiki = link.wiki or self.names[w]
                tw = self.names.index(to_wiki)
                to_path = link.to if not link.wiki else self.graphs[tw].page_index().resolve(link, "")
                hops.append((Hop(self.names[w], path, link.line, link.text, to_wiki, to_path or link.target),
                             int(self.src[e])))
            node = int(self.src[e])
        return hops[::-1]



def dangling_report(graphs: dict[str, LinkGraph], wikis: Sequence[str]) -> list[str]:
    """One line per link that leads nowhere, in the wikis of ``graphs`` (their serving builds).

    ``wikis`` are every wiki of the workspace: a link into one of them that has no index is reported
    as such; a link into a wiki that does not exist, or to a page it does not have, as dangling.
    """
    lines = []
    for name, g in sorted(graphs.items()):
        for path, entry in sorted(g.pages.items()):
            for link in entry.links:
                where = f"wiki '{name}': {path}:{link.line}: link {link.text}"
                if link.wiki is None:
                    if link.to is None:
                        lines.append(f"{where} is dangling: no page of the wiki has that name")
                elif link.wiki not in wikis:
                    lines.append(f"{where} is dangling: there is no wiki '{link.wiki}'")
                elif link.wiki not in graphs:
                    lines.append(f"{where} is not checked: wiki '{link.wiki}' has no index")
                elif graphs[link.wiki].page_index().resolve(link, "") is None:
                    lines.append(f"{where} is dangling: wiki '{link.wiki}' has no such page")
    return lines
