"""One question answered by several compositions side by side: the app's Compare page.

Each composition answers on its own (its own retrieval, clearance check and audit record); the
:class:`Comparison` says which passages two or more of them retrieved.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from . import extractive
from .access import Level
from .answers import Answer, AnswerResult, answer
from .composition import Composition
from .errors import QueryError
from .passage import Passage
from .prompt import NO_ANSWER
from .workspace import Workspace


@dataclass
class Comparison:
    """One question answered by several compositions: each result, and which passages are shared."""

    question: str
    results: dict[str, AnswerResult]

    def passage_key(self, result: AnswerResult, n: int) -> tuple[str, str, int, int]:
        p = result.passages[n]
        return (p.wiki, p.path, p.start, p.end)

    def shared(self) -> set[tuple[str, str, int, int]]:
        """Passages retrieved by two or more of the compositions."""
        seen: dict[tuple, int] = {}
        for result in self.results.values():
            for key in {self.passage_key(result, n) for n in range(len(result.passages))}:
                seen[key] = seen.get(key, 0) + 1
        return {key for key, count in seen.items() if count > 1}

    def tops(self, wikis: dict[str, tuple[str, ...]]) -> dict[str, TopPassage]:
        """Per composition that found anything: its top passage, the other compositions whose wikis
        (``wikis``: each composition's wiki names) include that passage's wiki, whether its answer
        answers (not the refusal) and how near its best sentence is to the question in meaning."""
        out = {}
        for name, result in self.results.items():
            if not result.passages:
                continue
            p = result.passages[0]
            ranked = extractive.rank(self.question, result.passages)
            out[name] = TopPassage(
                name, p, tuple(other for other, names in wikis.items() if other != name and p.wiki in names),
                bool(result.text) and NO_ANSWER not in result.text and not result.error,
                ranked[0].cosine if ranked else 0.0)
        return out

    def best(self, wikis: dict[str, tuple[str, ...]]) -> str | None:
        """The composition to choose for this question: of those whose answer answers, the one whose best
        sentence is nearest the question (MiniLM cosine); ``None`` if none answers or two are within 0.02."""
        ranked = sorted((t for t in self.tops(wikis).values() if t.answered), key=lambda t: -t.similarity)
        if not ranked or (len(ranked) > 1 and ranked[0].similarity - ranked[1].similarity < 0.02):
            return None
        return ranked[0].composition


@dataclass(frozen=True)
class TopPassage:
    """A composition's first passage for the question, and what makes it a reason to choose it."""

    composition: str
    passage: Passage
    also_in: tuple[str, ...]  # the other compositions that list the passage's wiki
    answered: bool
    similarity: float


def compare(ws: Workspace, compositions: list[str | Composition], question: str, *, clearance: Level | str,
            model: str | None = None, k: int | None = None, user: str | None = None) -> Iterator[tuple[str, Answer]]:
    """Start an answer per composition (2 to 4), in order; each is refused if above ``clearance``. A
    composition may be an ad-hoc one (:meth:`Workspace.adhoc`), named ``ad hoc: wiki, wiki``."""
    if not 2 <= len(compositions) <= 4:
        raise QueryError(f"compare two to four compositions, not {len(compositions)}: pick 2 to 4")
    for target in compositions:
        name = target if isinstance(target, str) else f"ad hoc: {', '.join(target.names)}"
        yield name, answer(ws, target, question, clearance=clearance, model=model, k=k, user=user)
