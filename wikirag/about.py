"""Questions about the knowledge base itself ("What is this about?", "What can I ask?", "Which wikis are
here?"), answered from the composition's description, its wikis' titles and descriptions and their index
pages: each a :class:`~wikirag.passage.Passage` with exact offsets into its file, cited like any other.

Only wikis at or below the caller's clearance are listed (checked again here, by their effective levels
now); a composition above it gives no description. An index page (``index.md`` at a wiki's source root, a
meta file, never indexed) is used where a build would read it but for that (:func:`index_text`; the
portal opens it by the same rule)."""

from __future__ import annotations

import bisect
import dataclasses
import fnmatch
import itertools
import os
import re
from pathlib import Path

import yaml

from .access import Level
from .composition import Composition
from .config import MAX_YAML_BYTES
from .page import parse_page, tag_matches
from .passage import Passage
from .prompt import NO_ANSWER
from .sources import MAX_READ_BYTES, decode, glob_regex
from .wiki import Wiki
from .workspace import Workspace

INDEX_PAGE = "index.md"
INDEX_CHARS = 1200  # of an index page: its first section, at most this much, cut at a line end
MAX_TOPICS = 10     # per wiki, in an answer
_KB = r"(?:knowledge ?base|kb|site|wikis?|rag|composition|collection|app|assistant|bot|chat|tool|place|thing)"
ABOUT = [re.compile(p) for p in (  # matched whole, on the question lower-cased without greeting or end mark
    r"(?:help(?: me)?|about|info|topics|who are you|what are you|how can you help(?: me)?)",
    rf"what(?:'s| is| are) (?:this|it|here|the|your)(?: {_KB})? (?:all )?about",
    rf"what(?:'s| is) (?:in )?(?:here|in here|there|this)|(?:which|what) {_KB} (?:is|are) (?:this|these|here)",
    r"what (?:(?:kinds? of |sorts? of )?questions (?:can|could|should) (?:i|we) ask|(?:can|could|should) (?:i|we) "
    r"(?:ask|search|look up|find|learn))(?: (?:you|here|about|in here|for))*",
    r"(?:which|what) (?:wikis?|topics|subjects|sources|compositions|knowledge bases)(?: (?:are|is) (?:here|there|"
    r"in here|available|covered)| (?:do|does|can) (?:you|it|this|i) (?:have|cover|know|hold|contain|search|ask "
    r"about|use|query)(?: about)?)(?: here)?",
    r"what (?:do|can|does) (?:you|it|this) (?:know|cover|do|answer|help(?: me)? with)(?: about)?",
    rf"(?:tell me about|list|show me|describe) (?:this |the |your |all the )?(?:{_KB}|topics|sources)",
)]
_LEAD = re.compile(r"^(?:(?:hi|hello|hey|ok|okay|so|please)\b[\s,!.]*)+")
_LINK = re.compile(r"\[\[([^\]|]+)(?:\|([^\]]+))?\]\]|\[([^\]]+)\]\(([^)\s]*)[^)]*\)")
_ITEM = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+(.+?)\s*$", re.MULTILINE)
_HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$", re.MULTILINE)
_KEY = re.compile(r"^([A-Za-z_][\w-]*)[ \t]*:", re.MULTILINE)  # a top-level key of a manifest
_SAID = {"name", "title", "description", "tags", "sensitivity"}  # keys that may be quoted with the title
_BRACKETED = re.compile(r"\[([\d\s,;]+)\]")  # what would read as a citation, [2] or [1, 3]
_ASKS_TOPICS = re.compile(r"\b(?:ask|topics?|cover|know|subjects?|help)\b")


def is_about(question: str) -> bool:
    """Whether ``question`` asks about the knowledge base itself (what it is, its wikis, what to ask)
    rather than something in it: a pattern of :data:`ABOUT` matches the whole question."""
    text = " ".join(question.lower().replace("\u2019", "'").split())
    text = _LEAD.sub("", text).rstrip(" ?!.").removesuffix(" please").strip()
    return any(p.fullmatch(text) for p in ABOUT)


def _plain(text: str) -> str:
    """Quoted text on one line (a statement and its ``[n]`` share a line), its ``[2]`` made ``(2)``: the
    file's own brackets must not read as citations."""
    return _BRACKETED.sub(r"(\1)", " ".join(text.split()))


def _read(path: Path | str, limit: int) -> str | None:
    """The UTF-8 text of ``path`` (at most ``limit`` bytes), or None."""
    try:
        with open(path, "rb") as fh:
            data = fh.read(limit + 1)
        return decode(data)[0] if len(data) <= limit else None
    except OSError:
        return None


def _node(text: str) -> yaml.Node | None:
    """YAML ``text`` composed (no alias is expanded) by the pure-Python composer, whose marks count
    characters; None if it does not parse."""
    try:
        return yaml.compose(text, Loader=yaml.SafeLoader)
    except (yaml.YAMLError, RecursionError):
        return None


def _scalars(text: str) -> dict[str, tuple[int, int, str]]:
    """The top-level scalars of YAML ``text``: ``key -> (start, end, value)``, the offsets of the value's
    source text (trailing space left out) and the string it means (quotes and folding undone)."""
    root, out = _node(text), {}
    for key, value in root.value if isinstance(root, yaml.MappingNode) else ():
        if isinstance(key, yaml.ScalarNode) and isinstance(value, yaml.ScalarNode):
            start = value.start_mark.index
            end = start + len(text[start:value.end_mark.index].rstrip())
            if end > start:
                out[str(key.value)] = (start, end, str(value.value))
    return out


def index_text(wiki: Wiki) -> str | None:
    """The text of the wiki's index page (``index.md`` at its source root), or None if it has none or a
    build would not read it but for the meta-file rule: excluded, outside ``source:``'s glob, without an
    ``include_tags`` tag, a symlink out of the root's folder, not a plain UTF-8 file."""
    spec = wiki.source_spec()
    full = os.path.realpath(os.path.join(spec.root, INDEX_PAGE))
    if ((spec.pattern is not None and not glob_regex(spec.pattern).match(INDEX_PAGE))
            or any(fnmatch.fnmatchcase(INDEX_PAGE, p) for p in wiki.manifest.exclude)
            or os.path.dirname(full) != os.path.realpath(spec.root) or not os.path.isfile(full)):
        return None
    text, wanted = _read(full, MAX_READ_BYTES), wiki.manifest.include_tags
    return None if text is None or (wanted and not tag_matches(parse_page(text).tags, wanted)) else text


def _index_passage(wiki: Wiki) -> Passage | None:
    """The index page's first section (to the next heading at its first heading's level or above), at
    most :data:`INDEX_CHARS` cut at a line end; after any frontmatter."""
    if (text := index_text(wiki)) is None:
        return None
    start = parse_page(text).body_start
    start += len(text[start:]) - len(text[start:].lstrip("\ufeff\r\n"))
    end = min(len(text), start + INDEX_CHARS)
    first = _HEADING.search(text, start)
    if first is not None and not text[start:first.start()].strip():
        level = len(first.group(1))
        following = next((h for h in _HEADING.finditer(text, first.end()) if len(h.group(1)) <= level), None)
        end = min(end, following.start()) if following else end
    if end < len(text) and text[end] not in "\r\n":  # cut at the last line end (else the last space)
        cut = text.rfind("\n", start, end)
        cut = cut if cut > start else text.rfind(" ", start, end)
        end = cut if cut > start else end
    if (end := start + len(text[start:end].rstrip())) <= start:
        return None
    heading = first.group(2) if first is not None and first.start() < end else wiki.manifest.title
    return Passage(0, wiki.name, INDEX_PAGE, start, end, text.count("\n", 0, start) + 1, heading, 0.0,
                   text[start:end])


def _manifest_passage(wiki: Wiki) -> Passage | None:
    """The manifest's title and description lines (the title key's line to the description's end),
    headed by the title; the description's alone when a key not in :data:`_SAID` lies between them."""
    spans = _scalars(text) if (text := _read(wiki.manifest_path, MAX_YAML_BYTES)) else {}
    if "title" not in spans:
        return None
    chosen = sorted(s[:2] for s in (spans["title"], spans.get("description")) if s)
    if set(_KEY.findall(text, chosen[0][0], chosen[-1][0])) - _SAID:
        chosen = [spans["description"][:2]]
    start, end = text.rfind("\n", 0, chosen[0][0]) + 1, chosen[-1][1]
    return Passage(0, wiki.name, ".wiki.yaml", start, end, text.count("\n", 0, start) + 1, spans["title"][2], 0.0,
                   text[start:end])


def passages(ws: Workspace, comp: Composition, clearance: Level | str) -> list[Passage]:
    """What the knowledge base says of itself to a caller of ``clearance``: the composition's
    ``description:`` (``wiki=""``, path relative to the workspace: ``rags/x.yaml``), then for each wiki at
    or below the clearance its manifest's title and description (``.wiki.yaml``) and its index page's
    first section (``index.md``). Each ``text`` is exactly ``file_text[start:end]``; ranks 1..n, score 0."""
    level = Level.parse(clearance)
    out: list[Passage] = []
    text = _read(comp.path, MAX_YAML_BYTES) if comp.path is not None and comp.level <= level else None
    span = _scalars(text).get("description") if text else None
    if span:
        path = Path(comp.path).resolve()
        rel = path.relative_to(ws.home).as_posix() if path.is_relative_to(ws.home) else path.as_posix()
        out.append(Passage(0, "", rel, span[0], span[1], text.count("\n", 0, span[0]) + 1, comp.name, 0.0,
                           text[span[0]:span[1]]))
    levels = ws.levels()
    for wiki in comp.wikis:
        if levels.get(wiki.name, Level.RESTRICTED) <= level:  # never listed above it, whatever comp says
            out += [p for p in (_manifest_passage(wiki), _index_passage(wiki)) if p is not None]
    return [dataclasses.replace(p, rank=i) for i, p in enumerate(out, start=1)]


def _topics(p: Passage) -> list[str]:
    """An index page's topics: its links' texts (not images, not links to meta pages ``_*``), else its
    list items; from its sections in turn, so a long first list does not crowd out the others."""
    headings = [m.start() for m in _HEADING.finditer(p.text)]
    groups: dict[int, list[str]] = {}
    for m in _LINK.finditer(p.text):
        if p.text[m.start() - 1:m.start()] != "!" and not os.path.basename(
                (m.group(4) if m.group(3) else m.group(1)).split("#")[0]).startswith("_"):
            groups.setdefault(bisect.bisect(headings, m.start()), []).append(m.group(3) or m.group(2) or m.group(1))
    for m in _ITEM.finditer(p.text) if not groups else ():
        groups.setdefault(bisect.bisect(headings, m.start()), []).append(m.group(1))
    turns = itertools.chain.from_iterable(itertools.zip_longest(*groups.values()))
    found = (_plain(t).strip("*_` ") for t in turns if t)
    return list(dict.fromkeys(t for t in found if t))[:MAX_TOPICS]


def extractive_answer(question: str, comp: Composition, passages: list[Passage]) -> str:
    """An offline answer from :func:`passages`: what the composition is, its wikis with their
    descriptions, and topics to ask about (first, for "What can I ask?"), in the files' own words, each
    statement on a line of its own with its ``[n]`` (so :func:`~wikirag.prompt.check_citations` holds it)."""
    if not passages:
        return NO_ANSWER
    intro, wikis, topics = f"This is **{comp.name}**.", [], []
    for n, p in enumerate(passages, start=1):
        if not p.wiki:
            node = _node(p.text)
            said = _plain(node.value if isinstance(node, yaml.ScalarNode) else p.text)
            intro = f"This is **{comp.name}**: {said} [{n}]"
        elif p.path == ".wiki.yaml":
            fields = {key: _plain(value) for key, (_, _, value) in _scalars(p.text).items()}
            title, description = fields.get("title") or p.heading, fields.get("description")
            wikis.append(f"- **{title}**" + (f": {description}" if description else "") + f" [{n}]")
        elif p.path == INDEX_PAGE and (found := _topics(p)):
            topics.append(f"- {p.heading}: {'; '.join(found)} [{n}]")
    count = "one wiki" if len(wikis) == 1 else f"{len(wikis)} wikis"
    parts = [intro] + ([f"It has {count}:\n" + "\n".join(wikis)] if wikis else [])
    if topics:
        asks = "You can ask about, for example:\n" + "\n".join(topics)
        parts = [asks, *parts] if _ASKS_TOPICS.search(question.lower()) else [*parts, asks]
    return "\n\n".join(parts)
