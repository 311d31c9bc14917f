"""One question answered by several compositions side by side: the app's Compare page.

Each composition answers on its own (its own retrieval, clearance check and audit record); the
:class:`Comparison` says which passages two or more of them retrieved.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from .access import Level
from .answers import Answer, AnswerResult, answer
from .composition import Composition
from .errors import QueryError
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


def compare(ws: Workspace, compositions: list[str | Composition], question: str, *, clearance: Level | str,
            model: str | None = None, k: int | None = None, user: str | None = None) -> Iterator[tuple[str, Answer]]:
    """Start an answer per composition (2 to 4), in order; each is refused if above ``clearance``. A
    composition may be an ad-hoc one (:meth:`Workspace.adhoc`), named ``ad hoc: wiki, wiki``."""
    if not 2 <= len(compositions) <= 4:
        raise QueryError(f"compare two to four compositions, not {len(compositions)}: pick 2 to 4")
    for target in compositions:
        name = target if isinstance(target, str) else f"ad hoc: {', '.join(target.names)}"
        yield name, answer(ws, target, question, clearance=clearance, model=model, k=k, user=user)
