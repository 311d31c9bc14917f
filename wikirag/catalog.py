"""What a user may see: wikis, compositions and pages at or below a clearance, and a page's links.

The app's pages call these; every function takes the caller's clearance and never returns anything
above it. A page is read only if it is one of the wiki's own source files (the same files a build
reads) or its index page (``index.md``, which about-answers cite), so a path from a URL cannot reach
outside the wiki: ``../``, absolute paths, symlinks out of
the source root and URL-encoded tricks all fail the same way, with :class:`NotFound`.
"""

from __future__ import annotations

import logging
import urllib.parse
from dataclasses import dataclass, field

from . import about, audit
from . import index as index_mod
from .access import Level
from .cache import DEFAULT_CACHE
from .composition import Composition
from .errors import NotFound, WikiragError
from .index import IndexStatus
from .links import PageIndex, parse_links
from .page import parse_page
from .sources import decode, discover
from .wiki import Wiki
from .workspace import Workspace

log = logging.getLogger("wikirag.access")


@dataclass(frozen=True)
class WikiInfo:
    """A wiki as the portal lists it; ``level`` is its effective level (raised when its sources overlap
    a higher wiki's, see :mod:`wikirag.overlap`), the one access is decided by."""

    wiki: Wiki
    status: IndexStatus
    level: Level

    @property
    def name(self) -> str:
        return self.wiki.name


def visible_wikis(ws: Workspace, clearance: Level | str) -> list[WikiInfo]:
    """Wikis at or below ``clearance`` (broken manifests are skipped: ``wikirag check`` reports them)."""
    return listing(ws, clearance, compositions=False).wikis


def visible_compositions(ws: Workspace, clearance: Level | str) -> list[Composition]:
    """Compositions at or below ``clearance`` that load without errors."""
    return listing(ws, clearance, wikis=False).compositions


def preferred(compositions: list[Composition]) -> list[Composition]:
    """``compositions`` in the order the app offers them: those marked ``default: true`` from the highest
    level down (the most specific to the user's clearance: a public user gets the public help, an engineer
    the engineering one), then the rest by name. Adding a composition never changes the default unless it
    is marked so. (The app preselects a user's last choice over this order.)"""
    def rank(c: Composition) -> tuple:
        return (not c.spec.default, -int(c.level) if c.spec.default else 0, c.name)

    return sorted(compositions, key=rank)


def most_different(compositions: list[Composition], first: str | None = None) -> list[str]:
    """Two compositions to compare that differ most in what they cover (the fewest wikis in common, as a
    share of all they list), starting with ``first`` when given; ties go to the order of ``compositions``."""
    if len(compositions) < 2:
        return [c.name for c in compositions]
    pairs = [(a, b) for i, a in enumerate(compositions) for b in compositions[i + 1:]
             if first is None or a.name == first or b.name == first]

    def overlap(pair: tuple[Composition, Composition]) -> float:
        x, y = set(pair[0].names), set(pair[1].names)
        return len(x & y) / len(x | y)

    a, b = min(pairs, key=overlap) if pairs else (compositions[0], compositions[1])
    return [a.name, b.name] if first is None or a.name == first else [b.name, a.name]


@dataclass(frozen=True)
class Listing:
    """What ``wikirag list`` shows a caller: the wikis and compositions they may see, how many others
    there are (a count, never a name), and the problems of what they may see."""

    wikis: list[WikiInfo]
    compositions: list[Composition]
    hidden: int
    problems: list[str]


def listing(ws: Workspace, clearance: Level | str, *, wikis: bool = True, compositions: bool = True) -> Listing:
    """The wikis and compositions at or below ``clearance``, with their index status.

    A wiki whose manifest cannot be read counts as ``restricted`` (fail closed): its problem is listed
    only for a restricted caller, else it is one of the hidden. A composition whose own level is within
    the clearance but which does not load (an unknown wiki, a wiki above its ceiling) is a problem.
    """
    level = Level.parse(clearance)
    shown_wikis: list[WikiInfo] = []
    shown_comps: list[Composition] = []
    hidden, problems = 0, []
    levels = ws.levels() if wikis else {}
    for name in ws.wiki_names() if wikis else ():
        try:
            wiki = ws.wiki(name)
        except WikiragError as exc:
            if level < Level.RESTRICTED:
                hidden += 1
            else:
                problems.append(str(exc))
            continue
        effective = levels.get(name, Level.RESTRICTED)
        if effective > level:
            hidden += 1
        else:
            shown_wikis.append(WikiInfo(wiki, index_mod.status(wiki), effective))
    for name in ws.composition_names() if compositions else ():
        try:
            shown_comps.append(ws.composition(name, level))
        except NotFound:  # above the clearance, or unreadable (its level unknown): counted, never named
            hidden += 1
        except WikiragError as exc:
            problems.append(str(exc))
    return Listing(shown_wikis, shown_comps, hidden, problems)


def _visible_wiki(ws: Workspace, name: str, clearance: Level | str, user: str | None) -> Wiki:
    """The wiki, if the caller may see it; otherwise NotFound (the same answer as for no such wiki)."""
    try:
        wiki = ws.wiki(name)
    except WikiragError:
        wiki = None
    if wiki is None or ws.level_of(name) > Level.parse(clearance):
        log.warning("refused wiki %r to %s (clearance %s)", name, user, clearance)
        audit.record(ws.home, "page_refused", user=user, clearance=clearance, wiki=name, reason="no such wiki to see")
        raise NotFound(f"no wiki '{name}' that you may see")
    return wiki


def wiki_pages(ws: Workspace, name: str, clearance: Level | str, user: str | None = None) -> list[str]:
    """The wiki's source pages (paths relative to its source root), as a build would read them."""
    return [f.path for f in discover(_visible_wiki(ws, name, clearance, user)).files]


@dataclass(frozen=True)
class PageView:
    """A page to show: its text without frontmatter, the frontmatter, and its tags."""

    wiki: str
    path: str
    text: str
    body_start: int
    frontmatter: dict = field(default_factory=dict)


def read_page(ws: Workspace, name: str, path: str, clearance: Level | str, user: str | None = None) -> PageView:
    """Read one page of a wiki the caller may see. ``path`` must be one of the wiki's source pages, or
    its index page ``index.md`` (a meta file, never indexed, that "What is this about?" answers cite),
    read by :func:`wikirag.about.index_text`'s rule: a build would read it but for being a meta file."""
    wiki = _visible_wiki(ws, name, clearance, user)
    wanted = urllib.parse.unquote(path or "")
    found = {f.path: f for f in discover(wiki).files}
    source = found.get(wanted)
    index = about.index_text(wiki) if source is None and wanted == about.INDEX_PAGE else None
    if source is None and index is None:
        log.warning("refused page %r of wiki %r to %s (not one of its pages)", path, name, user)
        audit.record(ws.home, "page_refused", user=user, clearance=clearance, wiki=name, path=path,
                     reason="not one of the wiki's pages")
        raise NotFound(f"no page '{path}' in wiki '{name}'")
    audit.record(ws.home, "page", user=user, clearance=clearance, wiki=name, path=wanted)
    text, reason = (index, None) if source is None else decode(source.abspath.read_bytes())
    if text is None:
        raise NotFound(f"page '{path}' cannot be shown: {reason}")
    page = parse_page(text)
    return PageView(wiki.name, wanted, text, page.body_start, page.frontmatter)


@dataclass(frozen=True)
class LinkView:
    """A link as the portal shows it. ``to_path`` is None when the target is not a page you may open
    (dangling, or in a wiki above your clearance: the two look the same, so nothing is revealed)."""

    line: int
    text: str
    to_wiki: str
    to_path: str | None
    anchor: str | None = None


@dataclass(frozen=True)
class PageLinksView:
    """A page's links and backlinks (from pages of wikis you may see), from the serving builds."""

    links: list[LinkView]
    backlinks: list[LinkView]  # here ``to_wiki``/``to_path`` name the page the link is on
    indexed: bool = True


def page_links(ws: Workspace, name: str, path: str, clearance: Level | str, user: str | None = None) -> PageLinksView:
    """The links of page ``path`` of wiki ``name`` and the links to it, limited to what ``clearance`` sees."""
    level = Level.parse(clearance)
    wiki = _visible_wiki(ws, name, level, user)
    graphs = {}
    for info in visible_wikis(ws, level):
        try:
            graphs[info.name] = DEFAULT_CACHE.get(info.wiki)[0].graph
        except WikiragError:
            continue
    graph = graphs.get(wiki.name)
    if graph is None:
        return PageLinksView([], [], indexed=False)
    links = []
    for link in graph.outgoing(path):
        target = graphs.get(link.wiki) if link.wiki else graph
        to = link.to if not link.wiki else (target.page_index().resolve(link, "") if target else None)
        links.append(LinkView(link.line, link.text, link.wiki or wiki.name, to, link.anchor))
    back = [LinkView(link.line, link.text, wiki.name, src) for src, link in graph.backlinks(path)]
    for other, g in graphs.items():
        if other == wiki.name:
            continue
        for src, entry in g.pages.items():
            for link in entry.links:
                if link.wiki == wiki.name and graph.page_index().resolve(link, "") == path:
                    back.append(LinkView(link.line, link.text, other, src))
    return PageLinksView(links, back)


def _page_index(ws: Workspace, name: str, level: Level) -> PageIndex | None:
    """Resolves link targets to the pages of wiki ``name``; None when the caller may not see it."""
    try:
        wiki = ws.wiki(name)
    except WikiragError:
        return None
    if ws.level_of(name) > level:
        return None
    try:
        graph = DEFAULT_CACHE.get(wiki)[0].graph
        if graph is not None:
            return graph.page_index()
    except WikiragError:
        pass
    return PageIndex(f.path for f in discover(wiki).files)  # not built yet: its pages as a build reads them


def linked_markdown(ws: Workspace, name: str, path: str, text: str, clearance: Level | str,
                    base: str = "portal") -> str:
    """``text`` — page ``path`` of wiki ``name``, or a passage of it — with its ``[[wikilinks]]`` and relative
    page links made markdown links to those pages' views (``base?wiki=…&path=…``), for display. A link to a
    page the caller may not see (another wiki above ``clearance``) or to no page becomes its plain text, so
    nothing says whether it exists. Links in code are left as written; offsets of ``text`` are not kept."""
    level = Level.parse(clearance)
    links = parse_links(text)
    if not links:
        return text
    indexes: dict[str, PageIndex | None] = {}
    out, at = [], 0
    for link in links:
        if link.kind == "markdown" and link.text.startswith("!"):
            continue  # an image
        target_wiki = link.wiki or name
        if target_wiki not in indexes:
            indexes[target_wiki] = _page_index(ws, target_wiki, level)
        pages = indexes[target_wiki]
        to = pages.resolve(link, path if target_wiki == name else "") if pages is not None else None
        if link.kind == "wikilink":
            inner = link.text.lstrip("!")[2:-2]
            alias = inner.split("|", 1)[1].strip() if "|" in inner else ""
            label = alias or " › ".join(p for p in (link.target, link.anchor) if p)
        else:
            label = link.text[1:link.text.index("](")]
        query = urllib.parse.urlencode({"wiki": target_wiki, "path": to}) if to else ""
        out += [text[at:link.start], f"[{label}]({base}?{query})" if to else label]
        at = link.end
    return "".join(out + [text[at:]])
