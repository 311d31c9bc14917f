"""Wikis whose sources overlap: a file reachable from two wikis takes the higher level for both.

A wiki reads the files under its source root (``source:``, default its own folder; a glob narrows it,
a symlinked folder is resolved to where it leads). Two wikis *overlap* when one root is the other or
lies inside it: then some file may be served by both, and the only safe level for that file is the
higher of the two. So each wiki's **effective level** — the one every clearance check uses — is the
highest level of the wikis it overlaps, itself included. This is decided from the roots alone
(conservative: a glob or ``exclude`` that happens to keep the files apart still counts as an overlap),
so it costs no file listing at query time and cannot be fooled by a file added later; only an
``exclude`` pattern that leaves out the other root as a whole (``gamma/*``) keeps two roots apart. A wiki whose
manifest cannot be read counts as ``restricted`` with its folder as its root (fail closed).
``wikirag check`` lists every overlap, with the files actually shared (:func:`report`).
"""

from __future__ import annotations

import fnmatch
import functools
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from .access import Level

# a path that no real file has, standing for "any file below": an exclude pattern that matches it
# (``gamma/*``, ``gamma/**``) leaves out a whole folder
_ANY = "\x00any\x00/\x00file\x00.md"


@dataclass(frozen=True)
class Source:
    """What decides an overlap: a wiki's resolved source root, its level and its ``exclude`` patterns."""

    root: Path
    level: Level
    exclude: tuple[str, ...] = ()

    @functools.cached_property
    def prefix(self) -> str:
        """The root as a string ending in ``/``: ``a`` covers ``b`` when ``b.prefix`` starts with ``a.prefix``."""
        return self.root.as_posix().rstrip("/") + "/"

    def covers(self, other: Source) -> bool:
        """True when ``other``'s root is this root or inside it, and no exclude pattern leaves all of it out."""
        mine, theirs = self.prefix, other.prefix
        if not theirs.startswith(mine):
            return False
        rel = theirs[len(mine):].rstrip("/")
        probe = f"{rel}/{_ANY}" if rel else _ANY
        return not any(fnmatch.fnmatchcase(probe, pattern) for pattern in self.exclude)


def overlapping(a: Source, b: Source) -> bool:
    """True when one wiki's root is the other's or inside it (and not excluded wholesale by it)."""
    return a.covers(b) or b.covers(a)


def effective_levels(roots: Mapping[str, Source]) -> dict[str, Level]:
    """Each wiki's level raised to the highest level of the wikis whose roots overlap its root."""
    items = list(roots.items())
    return {name: max([src.level] + [other.level for n, other in items if n != name and overlapping(src, other)])
            for name, src in items}


def pairs(roots: Mapping[str, Source]) -> list[tuple[str, str]]:
    """Every pair of wikis whose roots overlap, each pair once, sorted."""
    names = sorted(roots)
    return [(a, b) for i, a in enumerate(names) for b in names[i + 1:] if overlapping(roots[a], roots[b])]


def report(roots: Mapping[str, Source], files: Mapping[str, set[Path]]) -> tuple[list[str], list[str]]:
    """``wikirag check``'s lines about overlaps: ``(problems, notes)``. Wikis of different levels that
    overlap are problems (the lower one is treated as the higher); same-level overlaps are notes.
    ``files`` are each wiki's source files (resolved paths), to say how many are shared."""
    problems, notes = [], []
    for a, b in pairs(roots):
        root_a, level_a, root_b, level_b = roots[a].root, roots[a].level, roots[b].root, roots[b].level
        shared = sorted(files.get(a, set()) & files.get(b, set()))
        what = (f"{len(shared)} file(s) reachable from both (e.g. {shared[0]})" if shared
                else "their source folders overlap (no file is shared now)")
        line = f"wikis '{a}' ({level_a}, {root_a}) and '{b}' ({level_b}, {root_b}) overlap: {what}"
        if level_a == level_b:
            notes.append(line)
        else:
            high = max(level_a, level_b)
            problems.append(f"{line}; both are treated as {high}: give them disjoint sources, or the same level")
    return problems, notes
