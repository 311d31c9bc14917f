"""Follow-ups: a question asked in a conversation, rewritten as the standalone question that is searched.

(Being written: the offline rewrite and the condensing call land here.)
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Exchange:
    """One earlier turn of a conversation as a follow-up sees it: what was asked, what was searched for
    it (its standalone form) and the answer's text."""

    question: str
    searched: str
    answer: str
