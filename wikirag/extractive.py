"""Extractive answers: the passages' most relevant sentences, verbatim, each cited. Never invents text.

Used when no language model is configured (the offline default, see README) or asked for with
``--model extractive``. Each passage is cut into blocks by markdown-it (see :func:`_blocks`: paragraphs,
also inside list items and quotes, one line run at a time; each code line; headings and HTML left out),
then into sentences (a code line or a table row stays whole). :func:`rank` scores each by MiniLM cosine,
question-term coverage, its passage's cosine and rank; :func:`extract` leads with the best, adds at most
two supporting ones, or refuses (:func:`answers`). Weights and thresholds were chosen by measurement on
bench/questions.jsonl and a dev set (README "Answers")."""

from __future__ import annotations

import itertools
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from . import embeddings
from .bm25 import idf, tokenize
from .chunking import full_markdown
from .errors import EmbeddingError
from .passage import Passage
from .prompt import NO_ANSWER

MAX_SENTENCES = 3
MIN_CHARS = 20      # a shorter prose sentence is no answer; a command is (`lsof -i :{{port}}`, `ls -a`)
MIN_CODE_CHARS = 4
CANDIDATES = 12     # sentences compared with the question by MiniLM (the rest by terms only): 12, 16, 24 and
                    # 32 gave the same answers on bench/questions.jsonl (8: -1.5 points); embedding is the cost
W_COSINE, W_COVERAGE, W_PASSAGE, W_RANK = 0.3, 0.5, 0.5, 0.1  # chosen on bench/questions.jsonl + a dev set
MIN_COVERAGE = 0.35  # without the model: below it, "The passages do not contain the answer."
# with the model, the refusal (README "Answers"): no sentence within MIN_COSINE of the question; or one of
# its words is unknown to every wiki searched and rare in English (not a word of MiniLM's vocabulary:
# "caffeine", "Kubernetes") and none within RARE_COSINE; or UNKNOWN_SHARE of its terms are unknown and
# none within SHARE_COSINE
MIN_COSINE, RARE_COSINE, SHARE_COSINE, UNKNOWN_SHARE = 0.42, 0.53, 0.55, 0.3
W_NUMBER = 0.2       # the bonus, for a question asking for a quantity, of a sentence holding a number
_QUANTITY_QUESTION = re.compile(
    r"\b(?:how (?:long|many|much|often|hot|cold|big|large|small|far|fast|soon|old|warm|fine|coarse|strong)"
    r"|when|what (?:time|temperature|ratio|size|percentage|dose|weight|port|version|day)|at what|which (?:day|time))\b",
    re.IGNORECASE)
_NUMBER_WORDS = r"(?:two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|twenty|thirty|forty|fifty|hundred)"
_DIGIT = re.compile(r"\d")
# for "how many", a number spelled counts too ("Seven engineers"; not "one": "the old one"): elsewhere
# "two login roles" said nothing of "how often"
_NUMBER = re.compile(rf"\d|\b{_NUMBER_WORDS}\b", re.IGNORECASE)
_HOW_MANY = re.compile(r"\bhow many\b", re.IGNORECASE)
# the bonus (coverage units) of a sentence holding what the question asks for: "how often" → "every 90
# days", "how long" → "2 hours", "how far" → "3–5 cm", "when" → "02:30 UTC". 0.3 on bench/questions.jsonl
# (+3 right) and the 24 of bench/qa_examples.jsonl (+1); 0.6 loses two of them again
W_TYPE = 0.3
# a "how do I …" question asks how, not what not to do: a sentence starting "Don't", "Do not", "Never" or
# "Avoid" loses this much there ("How do I rotate a leaked API key?" led with "Don't blame the person who
# leaked the key."; 0.05–0.2 changed no count on bench/questions.jsonl or qa_examples.jsonl)
W_PROHIBITION = 0.1
_HOW_TO = re.compile(r"\bhow (?:do|can|should|would) (?:i|we|you)\b|\bhow to\b", re.IGNORECASE)
_PROHIBITION = re.compile(r"\W*(?:don't|do not|never|avoid)\b", re.IGNORECASE)
# a follow-up's carried topic words (wikirag.followup) weigh this share of a term of its own in the coverage
W_TOPIC = 0.5
W_HEADING = 0.5  # a question term in the heading path or lead, not the sentence, counts at this weight (0.25–1 tried)
# A sentence of a passage reached over links is read as the end of a chain: after the sentences holding
# those links (its bridges, "Rendered fragments and session data sit in [Quartz]…" before "Values larger
# than 1 MB are rejected."). A question term in a bridge counts in full (W_BRIDGE), the sentence is
# embedded after them, its passage cosine is the best of its own and its bridges' passages', and a chain
# covering CHAIN_COVERAGE of the question is no refusal whatever its cosine: the multi-hop question
# describes the page it starts from, so its cosine with the answer's sentence alone is low. Its cosine is
# the better of the chain's and the sentence's read alone (a chain of three bridges embeds as the bridges,
# whatever its last sentence says). Measured on bench/multihop_hard.jsonl (README "Graph layer"): a
# CHAIN_COVERAGE of 0.7 / 0.65 / 0.6 / 0.5 answered 70 / 71 / 73 / 73 of the 88 right and refused 9 / 9 / 9 / 8
# of the 20 of bench/multihop_unanswerable.jsonl; the single-hop answers are unchanged
W_BRIDGE, CHAIN_COVERAGE = 1.0, 0.6
# a candidate off the subject the question names, where links were followed from it (_unanchored), loses
# this much: on bench/multihop_hard.jsonl 0 / 0.1 / 0.2 / 0.3 answered 71 / 72 / 73 / 74 of the 88 right, and
# 18 / 20 / 20 / 20 of the easier 24; 0.2 is kept, the middle rather than the best fit to the hard set
W_UNANCHORED = 0.2
_NAME = re.compile(r"\b[A-Z][\w-]*")
_UNIT = r"(?:second|sec|minute|min|hour|hr|day|week|month|year|quarter)s?"


def _ci(pattern: str) -> re.Pattern:
    return re.compile(pattern, re.IGNORECASE)


# a question that asks for a time of day or a weekday (see asked_for)
_WHEN = _ci(r"\bwhat time\b|^\W*when\b|\bwhen (?:do|does|did|is|are|was|will|should|can|must)\b|\b(?:which|what) "
            r"(?:hours?|(?:week)?days?)\b|\bweekdays?\b|\bday of the week\b")
ANSWER_TYPES = [  # what a question asks for → what a sentence answering it holds
    (_ci(r"\bhow often\b|\bhow frequently\b"),
     _ci(r"\bevery\b|\b(?:daily|weekly|nightly|monthly|quarterly|yearly|annually|hourly)\b|\bonce\b|\btwice\b"
          r"|\btimes an?\b|\bper (?:day|week|month|year|hour)\b|\beach (?:day|week|month|year|quarter)\b"
          r"|\bintervals?\b")),
    (_ci(r"\bhow long\b|\bhow soon\b|\bwithin how\b|\bhow far (?:in advance|ahead|behind)\b"
         r"|\bhow much (?:earlier|later|longer|time)\b"),
     _ci(rf"\b\d+(?:[.,–-]\d+)?\s*(?:working |business )?{_UNIT}\b|\b\d+:\d\d\b|\b(?:{_NUMBER_WORDS}|one|a|an)[ -]"
         rf"(?:working |business )?{_UNIT}\b|\b(?:sprint|release|cycle)s?\b")),
    (_ci(r"\bhow (?:hot|cold|warm)\b|\btemperature\b"), _ci(r"°|\bdegrees?\b")),
    (_WHEN,
     _ci(r"\b\d{1,2}:\d\d\b|\b\d{1,2}\s*(?:am|pm)\b|\bUTC\b|\b(?:mon|tues|wednes|thurs|fri|satur|sun)days?\b")),
    (_ci(r"\bhow (?:far|high|deep|wide|tall)\b|\bwhat distance\b"),
     _ci(r"\b\d+(?:[.,–-]\d+)?\s*(?:mm|cm|m|km|in|inch(?:es)?|ft|feet|metres?|meters?)\b")),
    (_ci(r"\bhow (?:big|large|small)\b|\b(?:largest|biggest|smallest|maximum|minimum|max|size|limit)\b"),
     _ci(r"\b\d+(?:[.,]\d+)?\s*(?:[KMGT]i?B|bytes?|kilobytes?|megabytes?|gigabytes?|terabytes?)\b")),
    (_ci(r"\bwhere\b[^?]*\b(?:hosted|run|runs|served|deployed)\b"
         r"|\b(?:which|what) (?:cloud )?(?:regions?|locations?)\b"),
     re.compile(r"\bregions?\b|\b[a-z]{2}-[a-z]+-\d\b")),
    (_ci(r"\b(?:which|what) (?:city|cities|town|towns|office|offices)\b"
         r"|\bwhere\b[^?]*\b(?:work|works|based|sit|sits)\b"),
     re.compile(r"\b[Oo]ffices?\b|\bremotely\b|\bbased in\b")),
    (_ci(r"\bwhich version\b|\bwhat version\b|\bversion\b"), _ci(r"\b\d+\.\d+\b")),
    (_ci(r"\bwhich port\b|\bwhat port\b|\bport\b"), _ci(r"\bport\s*:?\s*\d{2,5}\b|:\d{2,5}\b")),
]


def asked_for(question: str, telling: bool = False) -> list[re.Pattern]:
    """What a sentence answering ``question`` holds, by :data:`ANSWER_TYPES` (none: the question asks for
    no kind of value they know). ``telling``: only the kinds that tell a page's sections apart, for the
    graph layer's choice among a linked page's passages — not a time of day or a weekday (:data:`_WHEN`),
    which an operations page has in most of its sections (stand-ups, hand-overs, backups, office hours)."""
    return [holds for asks, holds in ANSWER_TYPES if asks.search(question) and not (telling and asks is _WHEN)]


SUPPORT = 0.7        # a supporting sentence scores at least this share of the best
_MARKUP = re.compile(r"^\s*(?:[-*+]\s+|\d+[.)]\s+|>\s?)+")
_SENTENCE_END = re.compile(r"(?<=[.!?])[\"')\]]*\s+(?=[A-Z0-9\"'(\[*`])")
_CODE_SPAN = re.compile(r"(`+)[^`].*?\1")
_NEWLINE = re.compile(r"\r\n|\r|\n")  # the line breaks markdown-it counts
_URL = re.compile(r"<?\b(?:https?|ftp)://[^\s>]*>?")  # a URL's words ("How-Do-I-Use…") say nothing of the sentence
_LINK = re.compile(r"\[\[([^\]|]+)(?:\|([^\]]+))?\]\]|\[([^\]]+)\]\([^)]*\)")


def _unlink(text: str) -> str:
    """``[text](target)`` → ``text`` and ``[[page|alias]]`` → ``alias``: links of a wiki page mean nothing
    (and lead nowhere) once its sentence is quoted elsewhere."""
    return _LINK.sub(lambda m: m.group(3) or m.group(2) or m.group(1), text)


@dataclass(frozen=True)
class Sentence:
    """A sentence of passage ``n``: its offsets in the source file and its text, whitespace collapsed."""

    n: int
    start: int
    end: int
    text: str
    # what the sentence is read under, besides its heading: a code line, the prose (or comment) that
    # introduces it; a table row, the table's header row
    lead: str = ""


def _content_start(line: str, content: str) -> tuple[int, bool]:
    """Where ``line``'s own text starts once its container markup (list marker, ``>``, indentation) is
    skipped, and whether there was markup. ``content`` is the line as markdown-it's paragraph holds it (the
    containers' prefixes removed); the regex is the fallback where the two do not align (a NUL byte)."""
    own = content.strip()
    if own and line.rstrip().endswith(own):
        prefix = len(line.rstrip()) - len(own)
        return prefix, bool(line[:prefix].strip())
    markup = _MARKUP.match(line)
    lead = len(line) - len(line.lstrip())
    return (markup.end(), True) if markup else (lead, False)


def _blocks(text: str) -> list[tuple[int, int]]:
    """The runs of text of a passage that sentences may be cut from, as ``(start, end)`` offsets in it.

    Blocks come from markdown-it's block tokens (:func:`wikirag.chunking.full_markdown`, their ``map`` of
    source lines): every paragraph, at any depth in list items and quotes, is kept; fenced and indented
    code, headings (ATX and setext) and HTML blocks are left out. Within a paragraph a new block starts at
    each line that carries container markup (a list marker or ``>``: a sentence must not swallow the ``>``
    of the next quoted line, since it is quoted verbatim) and at each line starting with ``|``. Tables: the
    CommonMark parser sees a pipe table as a paragraph, and each of its rows is a block of its own, as
    before markdown-it was used; the delimiter row (``|---|``, no word in it) is dropped. Each block starts
    after its line's markup and ends at its last line's last non-space character.
    """
    line_starts = [0] + [m.end() for m in _NEWLINE.finditer(text)]
    line_ends = [m.start() for m in _NEWLINE.finditer(text)] + [len(text)]
    # markdown-it would not see a heading behind a BOM; a space keeps lengths and lines the same
    parsed = " " + text[1:] if text.startswith("\ufeff") else text
    tokens = full_markdown().parse(parsed)
    blocks: list[tuple[int, int, bool]] = []
    for token in tokens:  # code: each line a block of its own (a command is an answer), the fences left out
        if token.type in ("fence", "code_block") and token.map:
            first, last = token.map
            for number in range(first + (token.type == "fence"), last):
                line = text[line_starts[number]:line_ends[number]]
                if token.type == "fence" and line.strip().startswith(("```", "~~~")):
                    continue
                lead = len(line) - len(line.lstrip())
                blocks.append((line_starts[number] + lead, line_starts[number] + len(line.rstrip()), True))
    for opening, inline in itertools.pairwise(tokens):
        if opening.type != "paragraph_open" or not opening.map:
            continue
        first, last = opening.map
        current: tuple[int, int] | None = None
        for number, content in zip(range(first, last), inline.content.split("\n")):
            line = text[line_starts[number]:line_ends[number]]
            offset, markup = _content_start(line, content)
            start, end = line_starts[number] + offset, line_starts[number] + len(line.rstrip())
            if current is None or markup or line[offset:].startswith("|"):
                if current:
                    blocks.append(current)
                current = (start, end, False)
            elif end > start:
                current = (current[0], end, False)
        if current:
            blocks.append(current)
    return sorted(b for b in blocks if b[1] > b[0] and re.search(r"\w", text[b[0]:b[1]]))


def sentences(n: int, passage: Passage, shortest: int = MIN_CHARS) -> list[Sentence]:
    """The sentences of ``passage`` (number ``n``), each a verbatim span of the source file, prose ones of
    ``shortest`` characters or more."""
    out = []
    prose = header = ""  # the last prose (or code comment) seen; the header row of the table being read
    was_row = False
    for b_start, b_end, code in _blocks(passage.text):
        block = passage.text[b_start:b_end]
        row = not code and block.startswith("|")
        header = (header if was_row else " ".join(block.split())) if row else ""
        lead = prose if code else (header if row else "")
        command = code or bool(_CODE_SPAN.fullmatch(block))  # a code line, or a paragraph of one code span
        whole = command or row  # a command or a table row is quoted whole, never cut into sentences
        cuts = [0] + ([] if whole else [m.end() for m in _SENTENCE_END.finditer(block)]) + [len(block)]
        for s, e in itertools.pairwise(cuts):
            raw = block[s:e].rstrip()
            if len(raw.strip()) >= (MIN_CODE_CHARS if command else shortest):
                start = passage.start + b_start + s + (len(raw) - len(raw.lstrip()))
                text = " ".join(raw.split())
                out.append(Sentence(n, start, passage.start + b_start + s + len(raw), text,
                                    "" if lead == text else lead))
        if not code or block.lstrip().startswith(("#", "//")):
            prose = " ".join(block.split())
        was_row = row
    return out


Similarity = Callable[[str, list[str]], np.ndarray]


def minilm_similarity(question: str, texts: list[str]) -> np.ndarray | None:
    """The cosine of ``question`` with each of ``texts`` by the bundled MiniLM (``None`` if it is not
    installed: the choice is then lexical only). The question's vector is the one its search made."""
    try:
        asked = embeddings.recent([question])[0]  # the vector its search made
        vectors = embeddings.recent(texts, short=True)
    except EmbeddingError:
        return None
    return (vectors @ asked).astype(np.float64)


@dataclass(frozen=True)
class Scored:
    """A candidate sentence and what chose it: question-term coverage (0–1), cosine, the combination."""

    sentence: Sentence
    coverage: float
    cosine: float
    score: float
    passage_cosine: float = 0.0
    chained: bool = False  # read after its bridges (W_BRIDGE): its cosine is the chain's
    alone: float = 0.0  # the cosine of the sentence read alone (under its heading): for a chain, not its cosine


def _context(s: Sentence, passage: Passage) -> str:
    """What the sentence is embedded as: under the last heading of its passage, which names its topic
    ("Water temperature") where the sentence itself may not ("aim for 90–96 °C at the kettle")."""
    heading = passage.heading.rsplit(" > ", 1)[-1] if passage.heading else ""
    text = _URL.sub(" ", f"{s.lead} {s.text}" if s.lead else s.text)
    return f"{heading}: {text}" if heading else text


def rank(question: str, passages: list[Passage], similarity: Similarity | None = minilm_similarity,
         topic: str = "") -> list[Scored]:
    """The passages' sentences that share a term with the question or are near it in meaning, best first.

    A sentence's **coverage** is the share of the question's IDF mass (:func:`wikirag.bm25.idf` over the
    candidate sentences; a term no sentence has weighs most) found in the sentence, or at half weight in
    its passage's heading path or its :attr:`Sentence.lead`, plus :data:`W_TYPE` where the sentence holds
    what the question asks for (:data:`ANSWER_TYPES`: "how often" → "every …"). The :data:`CANDIDATES`
    best by coverage plus the passage's rank prior are compared with the question by ``similarity``
    (MiniLM cosine of the sentence under its heading and lead), and scored ``W_COSINE·cosine + W_COVERAGE·coverage +
    W_PASSAGE·passage cosine + W_RANK/passage rank`` (weights chosen by measurement, README "Answers"),
    less :data:`W_UNANCHORED` for a sentence off the subject the question names (:func:`_unanchored`).

    ``topic`` is the earlier turn's topic a follow-up carries (:func:`wikirag.followup.parts`): its terms
    count at :data:`W_TOPIC` of their weight (they found the passages; the follow-up's own words say which
    sentence answers), and the cosine is taken with the question and topic together.
    """
    own = set(tokenize([question])[0])
    wanted = own | set(tokenize([topic])[0])
    if topic:
        question = f"{question} ({topic})"
    pool = [(s, p) for i, p in enumerate(passages, start=1) for s in sentences(i, p)]
    if not wanted or not pool:
        return []
    terms = [set(tokens) & wanted for tokens in tokenize([_URL.sub(" ", s.text) for s, _ in pool])]
    headed = [set(tokens) & wanted for tokens in tokenize([p.heading for p in passages])]
    # a passage reached over links is read after the sentences holding them (what the question names,
    # "Egret", is on the page that links to the answer, not on the answer's): W_BRIDGE
    bridges = [" ".join(s.text for s in _bridges(passages, p)) for p in passages]
    bridged = [set(tokens) & wanted for tokens in tokenize(bridges)]
    led = [set(tokens) & wanted for tokens in tokenize([s.lead for s, _ in pool])]
    df = Counter(t for ts in terms for t in ts)
    weight = dict(zip(wanted, idf(np.array([df.get(t, 0) for t in wanted], dtype=np.float64), len(pool)).tolist()))
    weight = {t: w if t in own else W_TOPIC * w for t, w in weight.items()}
    total = sum(weight.values())
    coverage = [(sum(weight[t] for t in ts) + W_HEADING * sum(weight[t] for t in (headed[s.n - 1] | lead) - ts)
                 + W_BRIDGE * sum(weight[t] for t in bridged[s.n - 1] - ts - headed[s.n - 1] - lead)) / total
                for (s, _), ts, lead in zip(pool, terms, led)]
    if _QUANTITY_QUESTION.search(question):  # "how long/many/often …", "when", "what time": a number answers
        number = _NUMBER if _HOW_MANY.search(question) else _DIGIT
        coverage = [c + W_NUMBER * bool(number.search(s.text)) for c, (s, _) in zip(coverage, pool)]
    for holds in asked_for(question):
        coverage = [c + W_TYPE * bool(holds.search(s.text)) for c, (s, _) in zip(coverage, pool)]
    prior = [coverage[i] + W_RANK / pool[i][0].n for i in range(len(pool))]
    chosen = sorted(range(len(pool)), key=lambda i: (-prior[i], i))[:CANDIDATES]
    texts = [" ".join(filter(None, [bridges[pool[i][0].n - 1], _context(*pool[i])])) for i in chosen]
    cosine = similarity(question, texts) if similarity is not None else None
    # a chain's sentence read alone as well, for the refusal's test of a word no wiki has (answers)
    linked = [j for j, i in enumerate(chosen) if bridges[pool[i][0].n - 1]]
    alone = cosine.copy() if cosine is not None else None
    if cosine is not None and linked:
        alone[linked] = similarity(question, [_context(*pool[chosen[j]]) for j in linked])
    own_near = [_passage_cosine(p) for p in passages]
    sources = [_hop_sources(passages, p) for p in passages]
    near = [max([own_near[i]] + [own_near[n - 1] for n in sources[i]]) for i in range(len(passages))]
    how_to = bool(_HOW_TO.search(question))
    aside = _unanchored(question, passages, sources)
    out = []
    for j, i in enumerate(chosen):
        cos = max(float(cosine[j]), float(alone[j])) if cosine is not None else 0.0
        n = pool[i][0].n
        score = W_COSINE * cos + W_COVERAGE * coverage[i] + W_PASSAGE * near[n - 1] + W_RANK / n
        if how_to and _PROHIBITION.match(pool[i][0].text):
            score -= W_PROHIBITION
        if aside[n - 1]:
            score -= W_UNANCHORED
        out.append(Scored(pool[i][0], coverage[i], cos, score, near[n - 1], bool(bridges[n - 1]),
                          float(alone[j]) if alone is not None else 0.0))
    return sorted(out, key=lambda c: (-c.score, c.sentence.n, c.sentence.start))


def _names(question: str, passages: Sequence[Passage]) -> set[str]:
    """The terms of the question's names: its capitalised words ("Egret" of "Egret's photo resizer") that a
    passage's heading path has (a page's title, "Project Egret"). A word that starts a sentence of the
    question ("How", "Falcon needs …") counts only as a possessive ("Avocet's daily renewals") or where the
    passages write it capitalised after another word, in a sentence or a heading ("Project Falcon")."""
    words = []
    for m in _NAME.finditer(question):
        initial = not question[:m.start()].strip() or question[:m.start()].rstrip()[-1] in ".?!:;"
        if not initial or question[m.end():m.end() + 2] in ("'s", "’s") or _written_within(m.group(), passages):
            words.append(m.group())
    return set(tokenize([" ".join(words)])[0]) & set(tokenize([" ".join(p.heading for p in passages)])[0])


def _written_within(word: str, passages: Sequence[Passage]) -> bool:
    """Whether a passage writes ``word`` capitalised after another word, in its text or its heading."""
    after = re.compile(rf"(?<=[\w,;)] ){re.escape(word)}\b")
    return any(after.search(p.text) or after.search(p.heading) for p in passages)


def _unanchored(question: str, passages: Sequence[Passage], sources: Sequence[list[int]]) -> list[bool]:
    """Per passage: whether it is off the subject the question names (:func:`_names`), where links were
    followed from that subject. A passage is on the subject when it, or a passage holding a link it was
    reached through, says a name; the rest are off it once some passage was reached over links from a
    passage on it ("the rotation of the owners of Egret's photo resizer": the Edge team's, reached from
    Egret's page, not the Storage team's, whose page does not say Egret and is reached from no page that
    does). All ``False`` otherwise: a direct question ("How hot should the water be for a V60?") is
    answered by a passage that need not repeat its names. ``sources``: each passage's
    :func:`_hop_sources`."""
    names = _names(question, passages)
    if not names:
        return [False] * len(passages)
    says = [bool(names & set(tokens)) for tokens in tokenize([f"{p.heading} {p.text}" for p in passages])]
    linked = [any(says[n - 1] for n in hops) for hops in sources]
    if not any(linked):
        return [False] * len(passages)
    return [not (x or y) for x, y in zip(says, linked)]


def _passage_cosine(p: Passage) -> float:
    """The question's cosine with the whole passage, where retrieval measured it (the second stage's
    ``rerank`` contribution, else the dense layer's), else 0."""
    found = {c.layer: c.score for c in p.contributions if c.layer in ("rerank", "dense")}
    return float(found.get("rerank", found.get("dense", 0.0)))


def answers(question: str, ranked: list[Scored], semantic: bool, unknown: Sequence[str] = ()) -> bool:
    """Whether the best sentence answers at all (else the refusal), by the thresholds chosen by
    measurement (module constants, README "Answers"); without a model, coverage alone decides."""
    if not semantic:
        return ranked[0].coverage >= MIN_COVERAGE
    if max(c.cosine for c in ranked) < MIN_COSINE:
        return False
    # a word no wiki has: a chain's cosine has its bridges' words too, so each sentence counts read alone
    near = max(c.alone for c in ranked)
    unknown = set(unknown)
    if unknown:
        vocabulary = embeddings.vocabulary()
        spelled = re.findall(r"\w\w+", question.lower())
        words = [w for w, stems in zip(spelled, tokenize(spelled)) if set(stems) & unknown]
        if vocabulary is not None and any(w not in vocabulary for w in words) and near < RARE_COSINE:
            return False
        if len(unknown) >= UNKNOWN_SHARE * len(set(tokenize([question])[0])) and near < SHARE_COSINE:
            return False
    return True


def _title(p: Passage) -> str:
    """The page a passage is on, by its title (the first heading of its path), else its file."""
    return p.heading.split(" > ")[0] if p.heading else p.path


def _hop_sources(passages: Sequence[Passage], p: Passage) -> list[int]:
    """The numbers (1-based) of the passages holding the links ``p`` was reached through (its ``via``),
    in the order followed; empty if one of them is not among ``passages``."""
    out = []
    for hop in p.via:
        n = next((i for i, q in enumerate(passages, start=1) if q.wiki == hop.wiki and q.path == hop.path
                  and q.line <= hop.line <= q.line + q.text.count("\n")), None)
        if n is None:
            return []
        out.append(n)
    return out


def _bridges(passages: Sequence[Passage], p: Passage) -> list[Sentence]:
    """The sentences holding the links ``p`` was reached through, in the order followed; empty unless every
    one is found among ``passages``."""
    out = []
    for hop, n in zip(p.via, _hop_sources(passages, p)):
        q = passages[n - 1]
        # however short: "Owned by [[edge]]." is no answer, but it is the link that leads to one
        found = next((s for s in sentences(n, q, shortest=1) if hop.link in q.text[s.start - q.start:s.end - q.start]),
                     None)
        if found is None:
            return []
        out.append(found)
    return out


def _hop_sentences(question: str, passages: Sequence[Passage], best: Sentence) -> list[Sentence]:
    """The sentences holding the links that lead to ``best``'s passage, in the order followed, when the
    answer needs them: the question names something the page the links start from has and the answer's
    passage has not ("… that Egret's buying team can upload" answered on Tufa Images' page, which does
    not say "Egret"). Empty otherwise, or when a link's passage is not among ``passages``."""
    target = passages[best.n - 1]
    sources = _hop_sources(passages, target)
    if not sources:
        return []
    own = set(tokenize([question])[0])
    start = passages[sources[0] - 1]
    named = own & set(tokenize([start.heading + " " + start.text])[0])
    if not named - set(tokenize([target.heading + " " + target.text])[0]):
        return []
    return _bridges(passages, target)


def extract(question: str, passages: list[Passage], limit: int = MAX_SENTENCES,
            similarity: Similarity | None = minilm_similarity, unknown: Sequence[str] = (),
            topic: str = "") -> tuple[str, list[Sentence]]:
    """The answer text and the sentences it quotes: the sentence that best answers the question first,
    then up to ``limit - 1`` supporting ones as a list, each verbatim with its ``[n]``; or
    :data:`~wikirag.prompt.NO_ANSWER` when no sentence answers (:func:`answers`). ``topic``: see :func:`rank`."""
    ranked = rank(question, passages, similarity, topic)
    semantic = bool(ranked) and similarity is not None and any(c.cosine for c in ranked)
    chain = bool(ranked) and ranked[0].chained and ranked[0].coverage >= CHAIN_COVERAGE
    if not ranked or not (chain or answers(question, ranked, semantic, unknown)):
        return NO_ANSWER, []
    best = ranked[0]
    support = [c.sentence for c in ranked[1:]
               if c.score >= SUPPORT * best.score and c.sentence.text != best.sentence.text]
    # "Extract an archive:", or a code comment ("# prints nothing if the file is valid UTF-8"): what it
    # introduces is the answer
    if best.sentence.text.endswith(":") or best.sentence.text.startswith(("# ", "// ")):
        after = [s for s in sentences(best.sentence.n, passages[best.sentence.n - 1]) if s.start >= best.sentence.end]
        if after:
            # a list it introduces: its first two items ("Pages escalate …:" → "0 minutes: …", "5 minutes: …")
            lead = after[:2] if best.sentence.text.endswith(":") else after[:1]
            support = lead + [s for s in support if s not in lead]
    hops = _hop_sentences(question, passages, best.sentence)
    support = [s for s in support if s not in hops]
    chosen = [best.sentence] + support[: limit - 1]
    lines = [f"{_unlink(chosen[0].text)} [{chosen[0].n}]"] + [f"- {_unlink(s.text)} [{s.n}]" for s in chosen[1:]]
    if hops:  # the links followed first, then what the page they lead to says
        target = passages[best.sentence.n - 1]
        pages = [_title(passages[s.n - 1]) for s in hops] + [_title(target)]
        steps = "; ".join(f"{_unlink(s.text).rstrip('.')} [{s.n}]" for s in hops)
        lines[0] = f"{' → '.join(pages)}: {steps}; and {pages[-1]} says: {lines[0]}"
        chosen = hops + chosen
    return "\n\n".join(lines[:1] + (["\n".join(lines[1:])] if len(lines) > 1 else [])), chosen
