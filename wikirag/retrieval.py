"""Query a composition: search each wiki on its own, per layer, fuse, cut to the top ``k``.

The query path, in the order data flows: :func:`resolve` loads the composition once (its wikis'
manifests as they are now) and checks it against the caller's clearance; :func:`retrieve` checks each
wiki once more (defence in depth), takes its serving index from the :class:`~wikirag.cache.IndexCache`,
scores the BM25 layers of all the wikis in one pass, adds dense and graph lists where wikis have those
layers, fuses them (:mod:`wikirag.fusion`) and returns :class:`~wikirag.passage.Passage` objects.
:func:`search` is both steps plus the audit record; :func:`wikirag.answers.answer` calls them itself.
"""

from __future__ import annotations

import bisect
import dataclasses
import re
import time
import unicodedata
import weakref
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from . import audit, dense, embeddings, sources, store
from . import fusion as fusion_mod
from .access import Level
from .bm25 import tokenize
from .cache import DEFAULT_CACHE, Composed, IndexCache
from .composition import Composition
from .errors import AccessDenied, CompositionError, DenseUnavailable, EmbeddingError, IndexMissing, NotFound, QueryError
from .fusion import Candidates, Fused
from .graph import ComposedGraph
from .passage import Contribution, Hop, Passage
from .store import LoadedIndex
from .wiki import DENSE_FLOORS, Wiki
from .workspace import Workspace, audit_reason

MAX_K = 1000
GRAPH_WINDOW = 100
# The second stage: the fused top RERANK_DEPTH re-ordered by cosine + RERANK_RANK / fused rank (README,
# "Retrieval quality"). Top 20 with 0.1 lost 0.014 macro nDCG@10 on the dev mix with BM25 + dense (lisa
# −0.048: cosine alone orders worse than the hybrid there); top 10 with 0.15 gains 0.0017 there and keeps
# the question set's gain (hit@1 87% → 92.5%). bench/rerank_eval.py, bench/answer_eval.py --no-rerank.
RERANK_DEPTH = 10
TYPED_DEPTH = 30  # with the graph layer, the fused hits looked at for passages that hold what is asked for
RERANK_RANK = 0.15
LAYERS = ("bm25", "dense", "graph")
# a passage's via is led back at most this many times to a page whose title holds a question term the path
# lacks (_ReachedFrom.route: "the card service behind Avocet's renewals" is Avocet → Topaz → Payments team)
ROUTE_BACK = 2
MAX_QUESTION_CHARS = 10_000
_WORD = re.compile(r"\w")
# what check_question makes of a question's characters (its docstring says why)
_TYPED_SPACES = "\t\n\r\x0b\x0c"  # tab, line breaks, vertical tab, form feed: whitespace, not a mistake
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)")  # terminal colours, titles, links
_LIGATURES = {0xFB00: "ff", 0xFB01: "fi", 0xFB02: "fl", 0xFB03: "ffi", 0xFB04: "ffl", 0xFB05: "st", 0xFB06: "st"}


def _clean_char(code: int) -> str:
    """What one character of a question becomes: itself, a space, another character, or nothing."""
    if code < 0x20 or code == 0x7F:  # C0 controls and DEL: a space (they stand between words: NUL, ESC, BEL, …)
        return " "
    if 0x80 <= code < 0xA0:  # C1: a Windows-1252 byte read as Latin-1 (0x97 is cp1252's em dash)
        try:
            return bytes([code]).decode("cp1252")
        except UnicodeDecodeError:  # 0x81, 0x8D, 0x8F, 0x90, 0x9D: no cp1252 character, a control as C0 ones
            return " "
    char = chr(code)
    category = unicodedata.category(char)
    if category == "Cf":  # zero-width space / joiners, word joiner, BOM, soft hyphen, bidi marks: invisible
        return ""
    if category in ("Zs", "Zl", "Zp"):  # no-break, thin, ideographic … spaces; line and paragraph separators
        return " "
    return _LIGATURES.get(code, char)  # PDF text keeps the ﬁ of its font: the wiki has "fi"


class _Cleaning(dict):
    """``str.translate``'s table: Latin-1 filled in once, any other character looked up when met (not kept:
    a question may hold any of a million code points)."""

    def __missing__(self, code: int) -> str:
        return _clean_char(code)


_CLEANING = _Cleaning({code: _clean_char(code) for code in range(0x100)})


def _is_control(char: str) -> bool:
    """A character the cleaning turns into a space, another character or nothing, other than whitespace."""
    code = ord(char)
    return (code < 0x20 and char not in _TYPED_SPACES) or 0x7F <= code < 0xA0 or unicodedata.category(char) == "Cf"


def check_question(question: object) -> str:
    """``question`` cleaned into the text a search uses, else a :class:`QueryError` saying what is wrong.

    Text pasted from PDFs, Word documents, web pages and terminals carries characters nobody typed:
    Windows-1252 punctuation mis-decoded as C1 controls (U+0097 for an em dash, U+0092 for an
    apostrophe), no-break and thin spaces, zero-width spaces, byte-order marks, soft hyphens, NULs,
    terminal colour codes. Refusing such a question would lose what the user asked for a character
    they cannot see, so it is cleaned, the same way every time (cleaning clean text changes nothing):

    * a C1 control U+0080–U+009F that is a Windows-1252 byte becomes that character (U+0097 → "—",
      U+0096 → "–", U+0091/U+0092 → "‘’", U+0093/U+0094 → "“”", U+0085 → "…", U+0095 → "•", …);
    * the other controls (C0 such as NUL and ESC, U+007F, the five C1 codes cp1252 leaves undefined)
      become a space, not nothing: where they appear they separate words ("water\\x00tomatoes" is
      two words), and a terminal escape sequence (``ESC [ 31 m``) becomes one space as a whole;
    * tab, line breaks and every Unicode space (U+00A0, U+2009, U+3000, …, U+2028/U+2029) become a space;
    * format characters (Unicode ``Cf``: U+200B/U+200C/U+200D zero-width space and joiners, U+2060 word
      joiner, U+FEFF byte-order mark, U+00AD soft hyphen, bidi marks) are removed: they sit inside
      words ("wa\\u200bter" is "water");
    * the ligatures ﬀ ﬁ ﬂ ﬃ ﬄ ﬅ ﬆ (U+FB00–U+FB06) become their letters; the text is put in NFC (an
      accent typed as a combining mark is the precomposed letter the wiki holds);
    * runs of whitespace become one space, and leading and trailing whitespace is removed.

    Refused, as it cannot be made into a question: anything but a ``str``; a ``str`` over
    :data:`MAX_QUESTION_CHARS` characters (as given, or once cleaned); one that is not encodable as
    UTF-8 (a lone surrogate, such as ``'\\udcff'``, which is how Python passes a byte of a command line
    that is not UTF-8); and one that held control or invisible characters and has no letter or digit
    once they are removed. A question that was blank as typed is not refused: it is searched, finds
    nothing, and gets the "empty" hint. Called first by :func:`retrieve`, so :func:`search` and
    :func:`wikirag.answers.answer` both check, and both search the cleaned text.
    """
    if not isinstance(question, str):
        fix = "decode it to str first" if isinstance(question, (bytes, bytearray)) else "pass the question as a str"
        raise QueryError(f"the question is not valid text: it is {type(question).__name__}, not str; {fix}")
    if len(question) > MAX_QUESTION_CHARS:
        raise QueryError(f"the question is too long: {len(question):,} characters, at most {MAX_QUESTION_CHARS:,}; "
                         "shorten it to what you are looking for")
    try:
        question.encode("utf-8")
    except UnicodeEncodeError as exc:
        code = ord(question[exc.start])
        origin = (f" (the byte 0x{code - 0xDC00:02x}, which is not UTF-8: is your terminal set to UTF-8?)"
                  if 0xDC80 <= code <= 0xDCFF else "")
        raise QueryError(f"the question is not valid text: character {exc.start + 1} is U+{code:04X}, a lone "
                         f"surrogate{origin}; retype it") from None
    text = _ANSI.sub(" ", question) if "\x1b" in question else question
    if not (text.isascii() and text.isprintable()):
        text = unicodedata.normalize("NFC", text.translate(_CLEANING))
    cleaned = " ".join(text.split())
    if _WORD.search(cleaned) is None:
        bad = next((i for i, char in enumerate(question) if _is_control(char)), None)
        if bad is not None:
            raise QueryError(f"the question is empty after removing control characters: character {bad + 1} is "
                             f"U+{ord(question[bad]):04X}, and no letter or digit is left; type the question, or "
                             "paste it as plain text")
    if len(cleaned) > MAX_QUESTION_CHARS:  # a ligature or NFC can lengthen it
        raise QueryError(f"the question is too long: {len(cleaned):,} characters once cleaned, at most "
                         f"{MAX_QUESTION_CHARS:,}; shorten it to what you are looking for")
    return cleaned


def _dense_rows(question: str, indexes: list[LoadedIndex], depth: int, warnings: list[str],
                bm25_fallback: bool, comp: Composition) -> list[tuple]:
    """Each dense wiki's nearest passages, if the nearest is at least as similar as the wiki's floor
    (:meth:`DenseSpec.floor`; below it the wiki has no dense list: the question is near nothing in it),
    and the question's vector per wiki; the question is embedded once per embedding model."""
    groups: dict[tuple[str, str | None], list[int]] = {}
    for w, idx in enumerate(indexes):
        if idx.dense is not None:
            groups.setdefault((idx.dense.model, idx.dense.api_base), []).append(w)
    rows: list[tuple] = []
    if not groups:
        return rows, {}
    fallback = "searched with BM25 only" if bm25_fallback else "left out"
    vectors: dict[int, np.ndarray] = {}
    for (model, api_base), members in groups.items():
        try:
            vector = embeddings.recent([question], model, api_base)[0]
        except EmbeddingError as exc:
            names = ", ".join(indexes[w].wiki for w in members)
            warnings.append(f"dense layer of {names} unavailable ({exc}): {fallback}")
            continue
        for w in members:
            idx = indexes[w]
            dense_store = dense.store()
            try:  # of exactly this build, whose passages this query holds
                dense_store.ensure(idx.wiki, idx.build_id, idx.folder / "dense", idx.dense)
                ids, scores = dense_store.search(idx.wiki, vector, idx.dense.model_id, depth, build_id=idx.build_id)
            except KeyError:  # two newer builds were loaded meanwhile: this query's build is gone
                warnings.append(f"dense layer of {idx.wiki} skipped: a newer build was loaded meanwhile; ask again")
                continue
            except DenseUnavailable as exc:  # the Qdrant server is down: the wiki's BM25 list still answers
                warnings.append(f"dense layer of {idx.wiki} unavailable ({exc}): {fallback}")
                continue
            vectors[w] = vector
            floor = _floor(comp, idx)
            if floor is not None and (not len(scores) or scores[0] < floor):
                continue  # nearest neighbours always exist: a wiki's list counts only if its best is near enough
            rows.append((np.full(len(ids), w), np.ones(len(ids), dtype=np.int64), ids,
                         np.arange(1, len(ids) + 1), scores))
    return rows, vectors


def _rerank(fused: list[Fused], view: Composed, vectors: dict[int, np.ndarray]) -> list[Fused]:
    """The fused top hits re-ordered by the question's cosine with each passage (the wiki's own dense
    vectors: nothing is embedded here) combined with the fused rank: ``cosine + RERANK_RANK / rank``.

    Only hits of wikis whose question vector is known (a dense layer, searched now) move, among the
    places such hits hold; any other hit keeps its place. The cosine is on one scale for every wiki of a
    model, which raw BM25 scores are not: it is what can tell the answering passage of one wiki from a
    near miss of another. Each moved hit gets a ``rerank`` contribution (its cosine, its new rank)."""
    movable = [i for i, hit in enumerate(fused) if view.names.index(hit.wiki) in vectors]
    if len(movable) < 2:
        return fused
    store = dense.store()
    cosine: dict[int, float] = {}
    by_wiki: dict[int, list[int]] = {}
    for i in movable:
        by_wiki.setdefault(view.names.index(fused[i].wiki), []).append(i)
    for w, members in by_wiki.items():
        idx = view.indexes[w]
        try:
            sims = store.similarity(idx.wiki, vectors[w], np.array([fused[i].id for i in members]),
                                    build_id=idx.build_id)
        except (KeyError, DenseUnavailable):  # a newer build was loaded meanwhile, or the server is down
            return fused
        cosine.update(zip(members, sims.tolist()))
    score = {i: cosine[i] + RERANK_RANK / (i + 1) for i in movable}
    order = sorted(movable, key=lambda i: (-score[i], i))
    out = list(fused)
    for rank, (slot, i) in enumerate(zip(movable, order), start=1):
        hit = fused[i]
        extra = Contribution(hit.wiki, "rerank", rank, round(cosine[i], 6))
        out[slot] = dataclasses.replace(hit, score=score[i], contributions=(*hit.contributions, extra))
    return out


def _floor(comp: Composition, idx: LoadedIndex) -> float | None:
    """The cosine a dense hit of ``idx``'s wiki needs: its manifest's setting, else its model's default."""
    spec = comp.by_name[idx.wiki].manifest.layers.dense
    return spec.floor() if spec is not None else DENSE_FLOORS.get(idx.dense.model)


@dataclass(frozen=True)
class SearchResult:
    """The passages of a query, best first, with warnings (stale or missing indexes) and a hint."""

    question: str
    composition: str
    passages: list[Passage]
    warnings: list[str] = field(default_factory=list)
    hint: str | None = None
    seconds: float = 0.0
    wikis: list[str] = field(default_factory=list)
    # the question's terms (stemmed) that no wiki searched has anywhere: "caffeine" asked of a coffee wiki
    unknown_terms: list[str] = field(default_factory=list)
    # the passages that hold the links a returned passage was reached through (its ``via``), where they
    # are not returned themselves (rank 0): what an answer cites to show the hop
    linking: list[Passage] = field(default_factory=list)
    # each wiki's routing weight for the question (fusions that route; a composition of several wikis
    # searched with BM25): why one wiki's passages were preferred (:class:`WikiRoute`)
    routing: list[WikiRoute] = field(default_factory=list)


@dataclass(frozen=True)
class WikiRoute:
    """A wiki's routing for one question: ``weight`` is P(wiki | question) from the wikis' language models
    (the weights of a composition sum to 1), ``offset`` what the fusion added to each of its passages'
    scores (0 for the wiki the question most belongs to under ``routed``)."""

    wiki: str
    weight: float
    offset: float


def _routing(view: Composed, method: fusion_mod.FusionMethod, c: Candidates) -> list[WikiRoute]:
    """The :class:`WikiRoute` of each wiki, for a method that routes by the wikis' statistics."""
    if not method.term_stats or c.wiki_prior is None or c.top_score is None or len(view.names) < 2:
        return []
    offsets = method.linear(c)[1] if method.linear is not None else np.zeros(len(view.names))
    return [WikiRoute(name, float(np.exp(p)), float(o)) for name, p, o in zip(view.names, c.wiki_prior, offsets)]


def resolve(workspace: Workspace, composition: str | Path | Composition, clearance: Level | str,
            user: str | None = None) -> Composition:
    """The entry point's one resolution and clearance check: load (or refresh) ``composition`` with its
    wikis as their manifests are now, refused if it is above ``clearance``. A refusal or a bad
    composition is recorded in the audit log once, here."""
    level = Level.parse(clearance)
    try:
        return workspace.composition(composition, level)
    except (AccessDenied, CompositionError, NotFound) as exc:
        if not isinstance(exc, NotFound) or hasattr(exc, "reason"):  # a plain NotFound is no refusal
            _refused(workspace, user, level, composition, exc)
        raise


def _refused(workspace: Workspace, user: str | None, level: Level, asked, exc: Exception) -> None:
    """One audit record of a refusal, with its real cause (the caller's message may hide it)."""
    audit.record(workspace.home, "refused", user=user or audit.default_user(), clearance=level, asked=str(asked),
                 reason=audit_reason(exc))


def search(workspace: Workspace, composition: str | Path | Composition, question: str, *,
           clearance: Level | str, k: int | None = None, fusion: str | None = None,
           layers: tuple[str, ...] = LAYERS, cache: IndexCache | None = None,
           user: str | None = None, audit_event: str | None = "search") -> SearchResult:
    """Search ``composition`` for ``question`` as ``user`` with ``clearance``; recorded in the audit log
    (``audit_event=None``: not recorded, for benchmarks).

    ``layers`` limits the layers used (``("bm25",)``, ``("dense",)``; default: every layer a wiki has).
    Raises NotFound if the composition does not exist or is above the clearance (the same message:
    nothing above a clearance can be told from what does not exist), CompositionError for a bad one, QueryError for a bad ``k``, fusion or layer, and
    IndexMissing only when no wiki of the composition has an index (otherwise a warning). A dense layer
    that cannot be used (missing, model unavailable) is a warning: that wiki is searched with BM25.
    """
    started = time.perf_counter()
    level = Level.parse(clearance)
    who = user or audit.default_user()
    comp = resolve(workspace, composition, level, who)
    result = retrieve(workspace, comp, question, clearance=level, k=k, fusion=fusion, layers=layers, cache=cache,
                      user=who, started=started)
    if audit_event:
        audit.record(workspace.home, audit_event, **audit_fields(result, who, level))
    return result


def audit_fields(result: SearchResult, user: str, clearance: Level) -> dict:
    """What the audit log records about a search: ids and hashes, never passage or question text."""
    return {"user": user, "clearance": clearance, "composition": result.composition, "wikis": result.wikis,
            "question_sha256": audit.question_hash(result.question),
            "passages": [audit.passage_id(p) for p in result.passages], "seconds": round(result.seconds, 4)}


def retrieve(workspace: Workspace, comp: Composition, question: str, *, clearance: Level, k: int | None = None,
             fusion: str | None = None, layers: tuple[str, ...] = LAYERS, cache: IndexCache | None = None,
             user: str | None = None, started: float | None = None) -> SearchResult:
    """Search a composition already resolved by :func:`resolve` (no second lookup). Each wiki's level is
    checked against ``clearance`` once more before its index is touched (defence in depth)."""
    started = time.perf_counter() if started is None else started
    question = check_question(question)
    levels = workspace.levels()
    for name in comp.names:
        level = levels.get(name, Level.RESTRICTED)
        if level > clearance:  # resolving checked the composition; a wiki raised since then is refused here
            refusal = NotFound(f"composition '{comp.name}' cannot be searched now: one of its wikis is not "
                               "available to you (it was changed since the composition was loaded): ask again")
            refusal.reason = f"wiki '{name}' is {level}, above clearance {clearance}"
            _refused(workspace, user, clearance, comp.name, refusal)
            raise refusal
    k = comp.k if k is None else k
    if not 1 <= k <= MAX_K:
        raise QueryError(f"k must be between 1 and {MAX_K}, not {k}")
    method = comp.fusion if fusion is None else fusion_mod.get(fusion)
    unknown = set(layers) - set(LAYERS)
    if unknown or not layers:
        raise QueryError(f"unknown layer(s) {sorted(unknown)}: use {', '.join(LAYERS)}")
    if set(layers) == {"graph"}:
        raise QueryError("the graph layer follows links from the hits of the other layers: add bm25 or dense")
    cache = cache or DEFAULT_CACHE
    for _ in range(len(comp.wikis)):
        try:
            return _retrieve(workspace, comp, question, k, method, layers, cache, started)
        except store.PassagesDamaged as exc:  # a lazily loaded wiki's passages: left out, and run again
            cache.damaged(exc, next(w for w in comp.wikis if w.name == exc.wiki))
    return _retrieve(workspace, comp, question, k, method, layers, cache, started)


def _retrieve(workspace: Workspace, comp: Composition, question: str, k: int, method, layers: tuple[str, ...],
              cache: IndexCache, started: float) -> SearchResult:
    """:func:`retrieve` once its arguments are checked. Raises :class:`~wikirag.store.PassagesDamaged`
    when the passages of a lazily loaded wiki it returns turn out damaged (the caller runs it again)."""
    indexes, served_warnings, undense, dense_builds, builds = cache.serving(
        comp.wikis, lambda: _serving(comp.wikis, cache, workspace.home))
    warnings = served_warnings + (undense if "dense" in layers else [])
    if not indexes:
        raise IndexMissing(f"no wiki of composition '{comp.name}' has an index: " + "; ".join(warnings))
    tokens = tokenize([question])[0]
    try:
        view, left_out = cache.merged(indexes, workspace.home, builds)
    except IndexMissing as exc:  # every layer damaged
        raise IndexMissing(f"no wiki of composition '{comp.name}' has an index: "
                           + "; ".join([*warnings, str(exc)])) from None
    warnings = warnings + left_out
    cols = view.bm25.columns(tokens)
    weights, specs = comp.per_wiki(view.names)
    use_graph = "graph" in layers and any(specs)
    # with the graph layer, every list is as deep as GRAPH_WINDOW whatever k: the within-wiki fusion of
    # a linked passage's ranks then does not depend on how many passages were asked for
    depth = max(method.depth(k), GRAPH_WINDOW) if use_graph else method.depth(k)
    rows = []
    # the wiki prior of one wiki is 0 whatever the counts: they are not gathered then
    term_counts = view.bm25.term_counts(cols) if method.term_stats and len(view.names) > 1 else None
    prior = fusion_mod.log_prior(term_counts, view.bm25.wiki_tokens, len(view.names)) if method.term_stats else None
    dense = "dense" in layers and dense_builds and _WORD.search(question) is not None  # blank: nothing to embed
    top = None
    if "bm25" in layers and cols:
        scores = view.bm25.scores(cols, method.scoring)
        top = float(scores.max()) if len(scores) else 0.0
        if method.linear is not None and not dense and not use_graph:  # one list per wiki, fused linearly
            scale, offset = method.linear(_candidates(view, [], weights, term_counts, prior, top))
            hits = view.bm25.top_overall(scores, k, scale, offset)
        else:
            hits = view.bm25.top_per_wiki(scores, depth)
        rows.append((hits.wiki, np.zeros(len(hits.wiki), dtype=np.int64), hits.chunk, hits.rank, hits.score))
    if dense:
        dense_rows, vectors = _dense_rows(question, view.indexes, depth, warnings, bm25_fallback="bm25" in layers,
                                          comp=comp)
        rows += dense_rows
    else:
        vectors = {}
    candidates = _candidates(view, rows, weights, term_counts, prior, top)
    graph, holds = None, []
    if use_graph:
        graph = view.graph(tuple(spec is not None for spec in specs), tuple(bool(spec and spec.tags) for spec in specs))
        seed_count = max(spec.seeds for spec in specs if spec)
        first = method.fuse(candidates, max(k, seed_count))
        seeds = _seeds(view, first, specs, seed_count)
        if seeds:
            holds = _asked_for(question)
            match = _question_match(candidates, view)
            typed = (lambda node: _holding(holds, _chunk_at(view, node).text)) if holds else None
            rows.append(_graph_rows(graph, seeds, specs, match, typed))
            candidates = _candidates(view, rows, weights, term_counts, prior, top)
    else:
        seeds, match = [], None
    passages, links = [], {}  # links: node of a passage that holds a followed link → that passage's Fused
    reached_from = None
    deep = max(k, TYPED_DEPTH) if holds else k
    if vectors and comp.spec.rerank and RERANK_DEPTH:  # the top RERANK_DEPTH re-ordered, whatever k
        fused = method.fuse(candidates, max(deep, RERANK_DEPTH))
        fused = _rerank(fused[:RERANK_DEPTH], view, vectors) + fused[RERANK_DEPTH:]
    else:
        fused = method.fuse(candidates, deep)
    if holds:
        fused = _typed_first(fused, view, holds)
    fused = fused[:k]
    for rank, hit in enumerate(fused, start=1):
        c = view.chunks[hit.wiki][hit.id]
        via = ()
        if graph is not None and any(x.layer == "graph" for x in hit.contributions):
            node = int(view.bm25.offsets[view.names.index(hit.wiki)]) + hit.id
            reached_from = reached_from or _ReachedFrom(view, graph, seeds, cols, match)
            route = reached_from.route(node)
            via = tuple(hop for hop, _ in route)
            for _, source in route:
                w = _wiki_of(view.bm25.offsets, source)
                links.setdefault(source, Fused(view.names[w], source - int(view.bm25.offsets[w]), 0.0, ()))
        passages.append(Passage(rank, hit.wiki, c.path, c.start, c.end, c.line, c.heading, hit.score,
                                c.text, hit.contributions, via))
    returned = {(hit.wiki, hit.id) for hit in fused}
    linking_hits = [hit for hit in links.values() if (hit.wiki, hit.id) not in returned]
    linking = [Passage(0, hit.wiki, c.path, c.start, c.end, c.line, c.heading, 0.0, c.text)
               for hit in linking_hits for c in [view.chunks[hit.wiki][hit.id]]]
    checked, edited = _as_they_are_now(comp, view, fused + linking_hits, passages + linking)
    passages, linking = checked[:len(passages)], checked[len(passages):]
    warnings += edited
    hint = None
    if not passages:
        if not question.strip():
            hint = "the question is empty: type what you are looking for"
        elif not tokens:
            hint = "the question has only very common words (stopwords): add a specific term"
        else:
            hint = "no passage contains any of the question's terms (nor is near it in meaning): try other words"
    unknown = list(dict.fromkeys(t for t in tokens if t not in view.bm25.vocab and not _abbreviates(t, view.bm25)))
    return SearchResult(question, comp.name, passages, warnings, hint, time.perf_counter() - started,
                        list(comp.names), unknown, linking, _routing(view, method, candidates))


def term_shares(workspace: Workspace, comp: Composition, terms: list[str], *,
                cache: IndexCache | None = None) -> dict[str, float]:
    """For each BM25 term (already stemmed, :func:`wikirag.bm25.tokenize`), the share of the composition's
    passages that hold it (0.0 for a term none has): how common a word is in what this composition
    searches, for :mod:`wikirag.followup`. Reads the merged view a search reads (the same cache); an
    empty dict when no wiki of it has an index. The composition must have been resolved for the caller."""
    cache = cache or DEFAULT_CACHE
    indexes, _, _, _, builds = cache.serving(comp.wikis, lambda: _serving(comp.wikis, cache, workspace.home))
    if not indexes:
        return {}
    try:
        view, _ = cache.merged(indexes, workspace.home, builds)
    except IndexMissing:
        return {}
    bm25, total = view.bm25, max(view.bm25.num_docs, 1)
    shares = {}
    for term in terms:
        col = bm25.vocab.get(term)
        shares[term] = 0.0 if col is None else float(bm25.indptr[col + 1] - bm25.indptr[col]) / total
    return shares


_SORTED_TERMS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # a loaded BM25 index → its terms, sorted


def _abbreviates(term: str, bm25) -> bool:
    """Whether an unknown short term starts a longer term the wikis have ("repo" → "repositori"): it is
    read as that word's abbreviation, not as a topic they lack (the extractive answer refuses on the latter).
    A binary search in the index's terms, sorted once per loaded index (200k terms: 50 ms, then ~20 µs)."""
    if not 3 <= len(term) <= 5:
        return False
    terms = _SORTED_TERMS.get(bm25)
    if terms is None:
        terms = _SORTED_TERMS[bm25] = sorted(bm25.vocab)
    i = bisect.bisect_left(terms, term)
    return i < len(terms) and terms[i].startswith(term)


def _serving(wikis: tuple[Wiki, ...], cache: IndexCache,
             home: Path) -> tuple[list[LoadedIndex], list[str], list[str], bool, tuple[str, ...]]:
    """The wikis' serving indexes, with the warnings about them; the warnings of wikis that declare a dense
    layer their index lacks (for queries that use dense); whether any build has a dense layer (the dense
    lists are looked for only then); the build ids. Shared by the queries of a short window
    (:meth:`IndexCache.serving`)."""
    indexes: list[LoadedIndex] = []
    warnings: list[str] = []
    undense: list[str] = []
    cache.prefetch(wikis, home)
    for wiki in wikis:
        try:
            loaded, index_warnings = cache.get(wiki, with_bm25=len(wikis) == 1)  # one wiki: no merged view
        except IndexMissing as exc:
            warnings.append(str(exc))
            continue
        warnings += index_warnings
        changed = store.level_change(loaded.manifest, wiki) if loaded.level != wiki.level else None
        if changed:
            warnings.append(f"wiki '{wiki.name}' changed level since it was indexed ({changed}); "
                            f"it is treated as {wiki.level}: rebuild it to record the change")
        if wiki.manifest.layers.dense is not None and loaded.dense is None:
            undense.append(f"wiki '{wiki.name}' declares a dense layer but its index has none: "
                           f"run 'wikirag build {wiki.name}'; searched with BM25 only")
        indexes.append(loaded)
    return (indexes, warnings, undense, any(idx.dense is not None for idx in indexes),
            tuple(idx.build_id for idx in indexes))


def _as_they_are_now(comp: Composition, view: Composed, hits: list[Fused],
                     passages: list[Passage]) -> tuple[list[Passage], list[str]]:
    """Every returned passage checked against its file as it is now, so that no citation is ever wrong.

    One ``stat`` per file (:func:`wikirag.sources.files_changed`): a file whose size and mtime are what
    the build read serves its passages as they are (``current``). A file that differs is read: a passage
    whose text is still at its offsets stays ``current``; one whose text is elsewhere in the file is
    ``moved`` (the occurrence nearest its old place: new offsets and line); one whose text is gone, or
    whose file is gone or unreadable, is ``changed`` — shown as such, never cited with offsets nor handed
    to a model (:func:`wikirag.answers.answer` leaves it out). A wiki with edited files gets a stale
    warning saying to rebuild it.
    """
    by_wiki: dict[str, list[int]] = {}
    for hit in hits:
        by_wiki.setdefault(hit.wiki, []).append(hit.id)
    edited: dict[tuple[str, str], str | None] = {}  # (wiki, path) -> its text now (None: gone or unreadable)
    warnings = []
    for name in sorted(by_wiki, key=comp.names.index):  # in composition order
        stats = view.chunks[name].source_stats(by_wiki[name])
        changed = sources.files_changed(comp.by_name[name], stats, stats)
        for path in changed:
            edited[(name, path)] = sources.read_now(comp.by_name[name], path)
        if changed:
            shown = ", ".join(changed[:3]) + (f" and {len(changed) - 3} more" if len(changed) > 3 else "")
            warnings.append(f"wiki '{name}' is stale ({shown} changed since the build: its passages are "
                            f"located again in the files as they are now; run 'wikirag build {name}')")
    if not edited:
        return passages, warnings
    out = []
    for p in passages:
        if (p.wiki, p.path) in edited:
            p = relocate(p, edited[(p.wiki, p.path)])
        out.append(p)
    return out, warnings


def relocate(p: Passage, text: str | None) -> Passage:
    """``p`` as its file ``text`` is now: ``current`` if its text is still at its offsets, ``moved`` to
    the occurrence nearest them if it is elsewhere, else ``changed`` (also when the file is gone)."""
    if text is None:
        return dataclasses.replace(p, state="changed")
    if text[p.start:p.end] == p.text:
        return p
    at, best = text.find(p.text), -1
    while at != -1:  # the occurrence nearest the old place
        if best == -1 or abs(at - p.start) < abs(best - p.start):
            best = at
        if at > p.start:
            break
        at = text.find(p.text, at + 1)
    if best == -1:
        return dataclasses.replace(p, state="changed")
    return dataclasses.replace(p, start=best, end=best + len(p.text), line=text.count("\n", 0, best) + 1,
                               state="moved")


def _candidates(view: Composed, rows: list[tuple], weights: np.ndarray, term_counts: np.ndarray | None,
                prior: np.ndarray | None = None, top: float | None = None) -> Candidates:
    """The ranked lists' rows (wiki, layer, chunk, rank, score) as the fusion's input (``prior``: the
    wikis' log prior from ``term_counts``, when computed already; ``top``: the query's best BM25 score)."""
    if len(rows) == 1:  # one layer's list per wiki: already by wiki, then rank
        wiki, layer, chunk, rank, score = rows[0]
    else:
        wiki, layer, chunk, rank, score = (np.concatenate(parts) for parts in zip(*rows)) if rows else [np.empty(0)] * 5
        order = np.lexsort((rank, layer, wiki))  # rows by wiki, then layer, then rank
        wiki, layer, chunk, rank, score = wiki[order], layer[order], chunk[order], rank[order], score[order]
    return Candidates(
        wikis=view.names, layers=LAYERS, weights=weights,
        wiki=wiki.astype(np.int64, copy=False), layer=layer.astype(np.int64, copy=False),
        chunk=chunk.astype(np.int64, copy=False), rank=rank.astype(np.int64, copy=False),
        score=score.astype(np.float64, copy=False), term_counts=term_counts, wiki_tokens=view.bm25.wiki_tokens,
        wiki_prior=prior, top_score=top,
    )


def _seeds(view: Composed, first: list[Fused], specs: list, count: int) -> list[tuple[int, float]]:
    """The fused top ``count`` hits in wikis with a graph layer, as (node, restart weight 1/rank)."""
    seeds = []
    for rank, hit in enumerate(first[:count], start=1):
        w = view.names.index(hit.wiki)
        if specs[w] is not None:
            seeds.append((int(view.bm25.offsets[w]) + hit.id, 1.0 / rank))
    return seeds


class _ReachedFrom:
    """The seeds a passage counts as reached from over links (its ``via``): those that hold a term of the
    question that the passage's page has not ("Falcon", asking for the backup of Falcon's database, answered
    on Cobalt's page). A passage whose page has every term a linking seed shares with the question ("In
    which region is Cobalt DB hosted?", and Marble Warehouse's page links to Cobalt's) is found for itself,
    not through the link. (The offline answer states a hop by the like rule on the answer's passage rather
    than its page: extractive._hop_sentences.) :meth:`route` is the path of links itself.
    Which passage holds which term is read from the BM25 postings (sorted doc ids: a binary search per
    passage and term), nothing is tokenized again."""

    def __init__(self, view: Composed, graph: ComposedGraph, seeds: list[tuple[int, float]], cols: list[int],
                 match: tuple[np.ndarray, np.ndarray] | None = None):
        self.view, self.bm25, self.graph = view, view.bm25, graph
        self.cols = sorted(set(cols))
        self.titles: dict[int, np.ndarray] = {}
        self.seeds = [s for s, _ in seeds]
        self.weight = dict(seeds)
        self.seed_terms = self._holds(np.array(self.seeds, dtype=np.int64))
        self.pages: dict[int, np.ndarray] = {}
        keys, values = match if match is not None else (np.empty(0, dtype=np.int64), np.empty(0))
        self.match = dict(zip(keys.tolist(), values.tolist()))
        df = np.array([self.bm25.indptr[c + 1] - self.bm25.indptr[c] for c in self.cols], dtype=np.float64)
        self.idf = np.log1p(float(self.bm25.offsets[-1]) / np.maximum(df, 1.0))

    def _holds(self, nodes: np.ndarray) -> np.ndarray:
        """(len(nodes), len(cols)) booleans: does the passage hold the term."""
        out = np.zeros((len(nodes), len(self.cols)), dtype=bool)
        for j, col in enumerate(self.cols):
            out[:, j] = _find(self.bm25.indices[self.bm25.indptr[col]:self.bm25.indptr[col + 1]], nodes)[1]
        return out

    def _route(self, seeds: list[int], node: int, covered: np.ndarray) -> list[tuple[Hop, int]]:
        """The path to ``node`` from the seed whose page holds most of the question terms ``covered`` lacks
        (by IDF, times the seed's weight: 1 / its rank), then through the passages matching the question
        best, of the shortest such paths."""
        start = {s: self.weight[s] * float(self.idf @ (self._page_terms(s) & ~covered)) for s in seeds}
        return self.graph.route(seeds, node, value=lambda n: start.get(n, 0.0) + self.match.get(n, 0.0))

    def _page_terms(self, node: int) -> np.ndarray:
        """The question's terms that the page of passage ``node`` holds anywhere."""
        page = int(self.graph.page_node[node])
        if page not in self.pages:
            w = _wiki_of(self.bm25.offsets, node)
            g = self.graph.graphs[w]
            ids = np.asarray(g.chunks_of[int(g.page_of_chunk[node - int(self.bm25.offsets[w])])], dtype=np.int64)
            self.pages[page] = self._holds(ids + int(self.bm25.offsets[w])).any(axis=0)
        return self.pages[page]

    def _title_terms(self, node: int) -> np.ndarray:
        """The question's terms that the title of passage ``node``'s page (its heading path's first
        heading) holds."""
        page = int(self.graph.page_node[node])
        if page not in self.titles:
            heading = _chunk_at(self.view, node).heading
            held = set(self.bm25.columns(tokenize([heading.split(" > ")[0]])[0]))
            self.titles[page] = np.array([c in held for c in self.cols], dtype=bool)
        return self.titles[page]

    def __call__(self, node: int) -> list[int]:
        own = self._page_terms(node)
        return [s for s, terms in zip(self.seeds, self.seed_terms) if (terms & ~own).any()]

    def route(self, node: int) -> list[tuple[Hop, int]]:
        """The links passage ``node`` is reached through, each with the passage holding it: the shortest path
        from the seeds :meth:`__call__` gives, through the passages that match the question best
        (:meth:`ComposedGraph.route`), then led back while the title of a seed's page has a question term
        that none of the path's pages has (the page the question names): "the card service behind Avocet's
        renewals", answered on the Payments team's page, is reached from Topaz Payments' page (it says
        "card"), and Topaz from Project Avocet's, so the path is Avocet → Topaz → Payments team, not
        Topaz → Payments team. Only a title leads back: a page that merely holds a question word ("due")
        is no subject of the question. At most :data:`ROUTE_BACK` times."""
        route = self._route(self(node), node, self._page_terms(node))
        for _ in range(ROUTE_BACK):
            if not route:
                break
            pages = {int(self.graph.page_node[n]) for n in [node] + [source for _, source in route]}
            covered = np.logical_or.reduce([self._page_terms(n) for n in [node] + [source for _, source in route]])
            seeds = [s for s in self.seeds if int(self.graph.page_node[s]) not in pages
                     and (self._title_terms(s) & ~covered).any()]
            before = self._route(seeds, route[0][1], covered) if seeds else []
            if not before or any(int(self.graph.page_node[source]) in pages for _, source in before):
                break
            route = before + route
        return route


def _question_match(c: Candidates, view: Composed) -> tuple[np.ndarray, np.ndarray]:
    """How well passages match the question by the query's own lists so far: (passage nodes in the merged
    order, sorted; for each the sum of ``1 / (RRF_K + rank)`` over its BM25 and dense ranks). A passage in
    neither list scores 0 (the lists are ``GRAPH_WINDOW`` deep per wiki: below that in both is no match
    to speak of). Sparse: a million-passage composition costs what its lists hold."""
    nodes, inverse = np.unique(view.bm25.offsets[c.wiki] + c.chunk, return_inverse=True)
    return nodes, np.bincount(inverse, weights=1.0 / (fusion_mod.RRF_K + c.rank), minlength=len(nodes))


def _find(keys: np.ndarray, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where each of ``nodes`` is in the sorted ``keys``, and whether it is there at all."""
    if not len(keys):
        return np.zeros(len(nodes), dtype=np.int64), np.zeros(len(nodes), dtype=bool)
    at = np.minimum(np.searchsorted(keys, nodes), len(keys) - 1)
    return at, keys[at] == nodes


def _match_of(match: tuple[np.ndarray, np.ndarray], nodes: np.ndarray) -> np.ndarray:
    """:func:`_question_match`'s value of each of ``nodes`` (0 for a passage in neither list)."""
    keys, values = match
    at, found = _find(keys, nodes)
    return np.where(found, values[at], 0.0) if len(keys) else np.zeros(len(nodes))


def _order_ranks(values: np.ndarray) -> np.ndarray:
    """1 for the largest of ``values``, 2 for the next…; ties in index order."""
    ranks = np.empty(len(values))
    ranks[np.argsort(-values, kind="stable")] = np.arange(1, len(values) + 1)
    return ranks


def _wiki_of(offsets: np.ndarray, node: int) -> int:
    """The wiki (its place in the merged view) of passage ``node``."""
    return int(np.searchsorted(offsets, node, side="right") - 1)


def _chunk_at(view: Composed, node: int):
    """The passage of node ``node`` of the merged view."""
    w = _wiki_of(view.bm25.offsets, node)
    return view.chunks[view.names[w]][node - int(view.bm25.offsets[w])]


def _typed_first(fused: list[Fused], view: Composed, holds: list) -> list[Fused]:
    """Of each page in ``fused``, its passages that hold what the question asks for (``holds``) take the
    page's best places (and their scores), each group in its order; other pages keep theirs."""
    chunks = [view.chunks[hit.wiki][hit.id] for hit in fused]
    flags = [_holding(holds, c.text) for c in chunks]
    places: dict[tuple, list[int]] = {}
    for i, (hit, c) in enumerate(zip(fused, chunks)):
        places.setdefault((hit.wiki, c.path), []).append(i)
    out = list(fused)
    for at in places.values():
        if len(at) > 1 and any(flags[i] for i in at) and not all(flags[i] for i in at):
            for place, i in zip(at, sorted(at, key=lambda i: not flags[i])):
                out[place] = dataclasses.replace(fused[i], score=fused[place].score)
    return out


def _asked_for(question: str) -> list:
    """What a passage answering ``question`` holds, of the kinds that tell a page's sections apart ("how
    often" → "every …", "the biggest …" → a size: :func:`wikirag.extractive.asked_for`); [] for none."""
    from .extractive import asked_for  # (the graph layer's only use of it: not imported by a plain search)

    return asked_for(question, telling=True)


def _holding(holds: list, text: str) -> bool:
    return any(h.search(text) for h in holds)


def _graph_rows(graph: ComposedGraph, seeds: list[tuple[int, float]], specs: list,
                match: tuple[np.ndarray, np.ndarray], typed=None) -> tuple:
    """The graph layer's ranked list per wiki: the passages that links lead to from the seeds, chosen by the
    question. Every passage the walk reaches over links (:meth:`ComposedGraph.link_inflow`) is ranked twice
    among them — by that traffic (the prior: how strongly the top hits' links point at it) and by
    ``match`` (:func:`_question_match`) — and scores ``1/(RRF_K + inflow rank) + 1/(RRF_K + match rank)``
    (no match term without a match). So of a linked page, the section that answers comes first, not the
    one the page starts with: a page link gives all its passages the same traffic, and the question
    decides among them. At most the largest ``passages`` setting per wiki. A seed linked from another
    seed is in it too (project → service, both among the top hits: leaving seeds out lost 0.35 of
    multi-hop recall@10)."""
    nodes = np.array([s for s, _ in seeds], dtype=np.int64)
    score = graph.link_inflow(graph.pagerank(nodes, np.array([wt for _, wt in seeds])))
    reached = np.flatnonzero(score > 1e-12)
    m = _match_of(match, reached)
    by_match = np.where(m > 0, 1.0 / (fusion_mod.RRF_K + _order_ranks(m)), 0.0)
    score = score.copy()
    score[reached] = 1.0 / (fusion_mod.RRF_K + _order_ranks(np.round(score[reached], 12))) + by_match
    if typed is not None:  # of each linked page, its passages that hold what is asked for take its best scores
        flags = np.fromiter((typed(int(n)) for n in reached), dtype=bool, count=len(reached))
        if flags.any() and not flags.all():
            page, values = graph.page_node[reached], score[reached]
            best = np.lexsort((reached, -values, page))  # by page, best first
            typed_first = np.lexsort((reached, -values, ~flags, page))
            handed = np.empty_like(values)
            handed[typed_first] = values[best]
            score[reached] = handed
    wiki = np.searchsorted(graph.offsets, reached, side="right") - 1
    order = np.lexsort((reached, -score[reached], wiki))  # by wiki, best first
    reached, wiki = reached[order], wiki[order]
    starts = np.searchsorted(wiki, np.arange(len(graph.offsets) - 1))
    rank = np.arange(len(reached)) - starts[wiki] + 1
    keep = rank <= max(spec.passages for spec in specs if spec)
    reached, wiki, rank = reached[keep], wiki[keep], rank[keep]
    return (wiki, np.full(len(wiki), LAYERS.index("graph")), reached - graph.offsets[wiki], rank, score[reached])
