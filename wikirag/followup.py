"""Follow-ups: a question asked in a conversation, rewritten as the standalone question that is searched.

"And how long do I leave it to steep?" after a French press question means nothing alone. Before a
turn is retrieved it is made standalone from the turns before it:

* **offline** (the ``extractive`` and ``local`` models, and the fallback when a condensing call fails):
  :func:`rewrite`, deterministic and readable. A follow-up that depends on the conversation — it opens
  with "and", "also", "but", "so", "what about", "how about", "what if"; or it points back ("it",
  "that", "they", "there", "the same", …); or it names no topic of its own (beyond the question's frame —
  "how", "long", "who", "do" — one or two words that are common in the wikis searched: "Who do I page?"
  in the security runbooks); or every telling word of it is in the passages the earlier turn found —
  gets the earlier turn's topic terms in brackets: "And how long do I leave it to steep?" → "How long
  do I leave it to steep? (French press)"; an elliptical one ("What about Fridays?", "And for a French
  press?") gets the earlier question itself. The topic terms are words of the previous turn's *searched*
  question (so a chain of follow-ups keeps its topic) that the follow-up lacks, at most
  :data:`TOPIC_TERMS`, chosen as :func:`topic` says. A question that names its own topic ("My tap water
  is very hard. How often should I descale?") is left alone, so it does not drift to the earlier one;
  so is the first question of a conversation.
* **with a LiteLLM model**: one condensing call (:func:`condense_messages`, made by
  :func:`wikirag.answers.standalone`) rewrites the follow-up from the last turns (within
  :data:`HISTORY_TOKENS` counted with tiktoken's ``cl100k_base``), and the answer prompt then holds
  those turns too (:func:`wikirag.prompt.build_messages`).

"Common" and "rare" are read from the composition's own BM25 statistics (the share of its passages
holding the word, :func:`wikirag.retrieval.term_shares`): no list of topics to keep up to date.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .bm25 import tokenize

TOPIC_TERMS = 3  # at most this many of the earlier turn's words are carried into a follow-up
PHRASE_TERMS = 5  # … with the words next to them that complete a phrase ("cold" → "cold brew")
SHORT_TERMS = 2  # a question with more words of its own than this says what it is about
RARE_SHARE = 0.04  # a word in at most this share of the passages searched names a topic (see module docstring)
CARRY_SHARE = 0.25  # a carried word is in at most this share of the passages (else it says nothing of the topic)
HISTORY_TOKENS = 1500  # the turns given to a condensing call or an answer prompt, newest first, at most this
ANSWER_TOKENS = 300  # an earlier answer is cut to this many tokens there
CONDENSE_TOKENS = 100  # the most a condensing call may write

_WORD = re.compile(r"[\w'’-]+")
_LEAD = re.compile(r"^\s*(?:and|also|but|so|then|or|plus|(?:what|how) about|what if|same (?:for|with))\b",
                   re.IGNORECASE)
_ASKS = re.compile(r"\b(?:what|how|who|whom|whose|when|where|why|which|is|are|was|were|do|does|did|can|could|"
                   r"should|would|will|may|must|has|have)\b", re.IGNORECASE)  # a question of its own after the lead
_ELLIPSIS = re.compile(r"^\s*(?:(?:and|but|so|or)\s+)?(?:(?:what|how) about|and|or|also|plus|same (?:for|with))\b",
                       re.IGNORECASE)  # "What about Fridays?", "And for a dark roast?" (not "What if …")
_CONNECTIVE = re.compile(r"^\s*(?:and|also|but|so|then|or|plus)\b[\s,]*", re.IGNORECASE)  # dropped in the rewrite
_HOW = re.compile(r"\bhow\s+(\w+)", re.IGNORECASE)  # "how hot", "how long": the word after "how" asks, it is no topic
_POINTER = re.compile(r"\b(?:it|its|itself|they|them|their|theirs|those|these|he|she|him|her|the same|"
                      r"the other(?: one)?|that one|this one)\b|\b(?:that|this)\b(?=\s*(?:[?.!,]|$|"
                      r"(?:is|was|be|mean|means|take|takes|work|works|last|lasts|cost|costs|keep|keeps|"
                      r"happen|happens|apply|applies|one|too|again|also)\b))|(?<!is )(?<!are )(?<!was )(?<!were )\bthere\b(?!\s+(?:is|are|was|were)\b)",
                      re.IGNORECASE)
# the question's frame: words that ask, not words that say what about
_FRAME = set(tokenize([
    "how long often much many what who whom whose when where which why time times need needs get make use "
    "used using ask question anything something thing things way ways best good right else again instead "
    "exactly usually tell know mean happen happens say said should would could can may might must do does "
    "done go goes going want wanted kind sort type first next last ok okay please thanks one ones each "
    "every other same more less enough leave left take takes keep keeps put start stop work works "
    # function words the index keeps (bm25s's stopword list is short): pronouns, determiners, auxiliaries, prepositions
    "i me my mine myself we us our ours you your yours he him his she her hers them its own another someone "
    "somebody anyone anybody everyone everybody nobody none all any both few most some such only very just "
    "am were been being have has had having did doing will shall from up down out off over under again further "
    "once here now than too also about above below between through during before after while until against "
    "whether because so yet still even really maybe"])[0])


@dataclass(frozen=True)
class Exchange:
    """One earlier turn of a conversation as a follow-up sees it: what was asked, what was searched for
    it (its standalone form) and the answer's text."""

    question: str
    searched: str
    answer: str
    topic: str = ""  # the heading path of the passage the answer cited first ("French press > The steep")
    context: str = ""  # the text of the passages the answer was given

    @classmethod
    def of(cls, result) -> Exchange:
        """The exchange of an :class:`~wikirag.answers.AnswerResult`."""
        first = result.citations[0].passage.heading if result.citations else ""
        return cls(result.question, result.searched or result.question, result.text, first,
                   "\n".join(p.text for p in result.passages))


Shares = Callable[[list[str]], dict[str, float]]  # stems → share of the composition's passages holding each


def _stems(words: Sequence[str]) -> list[str]:
    """Each word's BM25 term ('' for a stopword or a one-letter word)."""
    return [t[0] if t else "" for t in tokenize(list(words))]


def depends(question: str, shares: Shares | None, previous: Exchange | None = None) -> bool:
    """Whether ``question`` needs the conversation before it (see the module docstring)."""
    if _LEAD.match(question) or _POINTER.search(question):
        return True
    own = list(dict.fromkeys(s for s in _stems(_WORD.findall(question)) if s and s not in _FRAME))
    if not own:
        return True
    known = shares(own) if shares is not None else {}
    if len(own) <= SHORT_TERMS and shares is not None and not any(known.get(s, 0.0) <= RARE_SHARE for s in own):
        return True  # one or two common words: no topic of its own (a rare or unknown word would name one)
    if previous is not None and previous.context:
        # every telling word of it is in the passages the earlier turn found: it goes on with that topic
        # ("How long after capture are refunds allowed?" after a question on the payment service)
        telling = [s for s in own if known.get(s, 0.0) <= CARRY_SHARE] if shares is not None else own
        found = set(_stems(_WORD.findall(previous.context)))
        return bool(telling) and all(s in found for s in telling)
    return False


def topic(previous: Exchange, question: str, shares: Shares | None) -> list[str]:
    """The words of ``previous`` (an earlier turn's searched question) that carry its topic into
    ``question``: content words it lacks, at most :data:`TOPIC_TERMS`, in their order. The earlier
    follow-up's own words come before those it carried; then words of the heading of the passage the
    earlier answer cited first ("API key" of "Leaked API key"); then those the earlier answer holds most
    often (what the wikis matched: "key" in "Someone pushed an API key…", not "someone"); then the rarest
    in the wikis. A word in more than :data:`CARRY_SHARE` of the passages is carried only when it is in
    that heading, when nothing else is left, or next to the first one carried ("cold brew", "API key")."""
    searched = previous.searched or previous.question
    body = parts(searched, previous.question)[0]
    own_words = len(_WORD.findall(body))  # the earlier follow-up's own words come before those it carried
    words = _WORD.findall(searched)
    stems = _stems(words)
    asking = set(_stems(_HOW.findall(searched)))
    have = set(_stems(_WORD.findall(question)))
    answered = Counter(s for s in _stems(_WORD.findall(previous.answer)) if s)
    headed = set(_stems(_WORD.findall(previous.topic)))
    candidates: dict[str, int] = {}
    for i, s in enumerate(stems):
        if s and s not in _FRAME and s not in asking and s not in have and s not in candidates:
            candidates[s] = i
    if not candidates:
        return []
    known = shares(list(candidates)) if shares is not None else {}
    usable = {s: i for s, i in candidates.items() if known.get(s, 0.0) <= CARRY_SHARE or s in headed} or candidates
    chosen = sorted(usable, key=lambda s: (usable[s] >= own_words, s not in headed, -answered[s],
                                           known.get(s, 0.0) or 1.0, usable[s]))[:TOPIC_TERMS]
    at = {candidates[s] for s in chosen}
    # the first word brings the words next to it that are candidates too: "cold" brings "brew", "key" "API"
    at |= {j for j in (candidates[chosen[0]] - 1, candidates[chosen[0]] + 1) if j in candidates.values()}
    return [words[i] for i in sorted(at)][:PHRASE_TERMS]


def rewrite(question: str, history: Sequence[Exchange], shares: Shares | None = None) -> str:
    """``question`` as a standalone question, offline: unchanged when it needs no earlier turn (or there
    is none), else the earlier turn's topic words added in brackets (see the module docstring)."""
    if not history or not depends(question, shares, history[-1]):
        return question
    body = _CONNECTIVE.sub("", question, count=1).strip() or question.strip()
    body = body[0].upper() + body[1:]
    rest = _LEAD.sub("", question, count=1)
    if _ELLIPSIS.match(question) and not _ASKS.search(rest) and len(_WORD.findall(rest)) <= 5:
        # "And for a French press?", "What about Fridays?": the earlier question asked again of something else
        earlier = parts(history[-1].searched or history[-1].question, history[-1].question)[0]
        return f"{body} ({earlier.strip().rstrip('?').strip()})"
    carried = topic(history[-1], question, shares)
    if not carried:
        return question
    return f"{body} ({' '.join(carried)})"


_CARRIED = re.compile(r"^(.*\S)\s+\(([^()]+)\)$", re.DOTALL)


def parts(searched: str, question: str) -> tuple[str, str]:
    """(the follow-up's own words, the topic :func:`rewrite` carried into it) of a searched question;
    ``(searched, "")`` when it carries none (a question that was not rewritten, or a model's rewrite)."""
    found = _CARRIED.match(searched)
    if searched == question or found is None or found.group(2) in question:
        return searched, ""
    return found.group(1), found.group(2)


def _tokens(text: str) -> int:
    from .chunking import count_tokens

    return count_tokens(text)


def _cut(text: str, tokens: int) -> str:
    from .chunking import encoding

    ids = encoding().encode_ordinary(text)
    return text if len(ids) <= tokens else encoding().decode(ids[:tokens]) + " …"


_CITATION = re.compile(r"\s*\[\d+(?:\s*[,;]\s*\d+)*\]")


def recent(history: Sequence[Exchange], budget: int = HISTORY_TOKENS) -> list[Exchange]:
    """The last turns, oldest first, that fit ``budget`` tiktoken tokens (each answer cut to
    :data:`ANSWER_TOKENS`, its ``[n]`` markers dropped: they name passages of another turn)."""
    kept: list[Exchange] = []
    used = 0
    for ex in reversed(history):
        answer = _cut(_CITATION.sub("", ex.answer), ANSWER_TOKENS)
        cost = _tokens(ex.question) + _tokens(answer) + 8
        if used + cost > budget:
            break
        kept.append(Exchange(ex.question, ex.searched, answer))
        used += cost
    return kept[::-1]


CONDENSE_SYSTEM = (
    "Rewrite the user's last question as one standalone question that can be understood without the "
    "conversation: replace words like 'it', 'that' or 'there' with what they refer to, and add the topic "
    "an elliptical question ('and for X?', 'what about Y?') continues. Keep its language and meaning; add "
    "nothing else. If it is already standalone, repeat it unchanged. Reply with the question only."
)


def condense_messages(question: str, history: Sequence[Exchange]) -> list[dict[str, str]]:
    """The messages of a condensing call: the rules, then the recent turns and the follow-up as data."""
    lines = []
    for ex in recent(history):
        lines += [f"User: {ex.question}", f"Assistant: {ex.answer}"]
    user = "Conversation:\n" + "\n".join(lines) + f"\n\nLast question: {question}\n\nStandalone question:"
    return [{"role": "system", "content": CONDENSE_SYSTEM}, {"role": "user", "content": user}]


def clean_condensed(text: str, question: str) -> str | None:
    """The model's rewrite as a question to search, or None when it is not one (empty, or rambling)."""
    text = text.strip().splitlines()[0].strip() if text.strip() else ""
    text = re.sub(r"^(?:standalone question|question)\s*:\s*", "", text, flags=re.IGNORECASE).strip().strip('"“”')
    if not text or len(text) > max(300, 4 * len(question)):
        return None
    return text
