"""Feedback on answers, and the questions the wikis could not answer (the "gaps" of each wiki).

Every finished answer that was refused (the passages do not hold it, or nothing matched) or cited a
passage for a statement it does not hold is recorded (:func:`record_answer`), and so is every thumbs
up or down a user gives an answer, with an optional comment (:func:`vote`). A record keeps the
question, the question as searched, the composition and its level at the time, the wikis searched and
the *locations* of the cited passages (wiki, path, offsets, line, heading: never their text)::

    {"id", "at" (epoch seconds), "kind" ("refused" | "unsupported" | "down" | "up"), "user",
     "composition", "level", "wikis", "question", "searched", "comment", "cited": [{n, wiki, path,
     start, end, line, heading}], "unsupported" (the [n] cited for what they do not hold), "turn"}

They are kept in ``<workspace>/.sessions/feedback.jsonl`` (mode 0600 in a 0700 folder), one JSON
object per line. Several app processes may write at once: each change is one append of a whole line
under the file's lock (:func:`wikirag.filestore.locked`), so no write is lost and none interleaves
(a torn last line, from a crash mid-write, is skipped by readers and never glued to the next record).
An append is cheap: this process reads only the bytes appended since it last looked, to count the
records. A second vote by the same user on the same turn replaces the first (the newer line wins
when the file is read). The file is bounded: it is compacted, atomically (temp file, then rename),
to the newest :data:`MAX_RECORDS` (20,000) records once it holds :data:`SLACK` more; readers never
see more than the newest 20,000. ``WIKIRAG_FEEDBACK=off`` keeps nothing (no record, no vote).
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import re
import secrets
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

from . import filestore
from .access import Level
from .errors import LevelError, NotFound
from .workspace import Workspace

FEEDBACK_ENV = "WIKIRAG_FEEDBACK"  # "off": keep no feedback at all
MAX_RECORDS = 20_000  # the newest records kept (and read)
SLACK = 2_000  # the file is compacted to MAX_RECORDS once it holds this many more lines
MAX_COMMENT = 2_000  # characters of a comment kept
MAX_TEXT = 10_000  # characters of a question kept (retrieval refuses longer ones anyway)
KINDS = ("refused", "unsupported", "down", "up")
GAP_KINDS = ("refused", "unsupported", "down")
log = logging.getLogger("wikirag.feedback")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_seen: dict[str, tuple[int, int, int]] = {}  # file -> (inode, size, lines) when this process last counted
_cache: dict[str, tuple[tuple, list[dict]]] = {}  # file -> (its stat, its live records)


def path_for(home: Path) -> Path:
    return Path(home) / ".sessions" / "feedback.jsonl"


def enabled() -> bool:
    """False when ``WIKIRAG_FEEDBACK=off`` (the app then offers no thumbs)."""
    return os.environ.get(FEEDBACK_ENV, "").strip().lower() != "off"


def _clean(text: object, limit: int) -> str:
    """One line of user text as kept: valid UTF-8, no control characters but newlines and tabs, capped."""
    text = str(text or "").encode("utf-8", "replace").decode("utf-8").replace("\r\n", "\n")
    return _CONTROL.sub("", text).strip()[:limit]


def _location(c) -> dict:
    p = c.passage
    changed = getattr(p, "state", "current") == "changed"  # its offsets point at other text now
    return {"n": c.n, "wiki": p.wiki, "path": p.path, "start": None if changed else p.start,
            "end": None if changed else p.end, "line": None if changed else p.line, "heading": p.heading}


def _record(kind: str, result, user: str, level: Level | str, comment: str, turn: str | None) -> dict:
    wikis = list(result.wikis) or sorted({p.wiki for p in result.passages})  # an older result: its passages'
    return {"id": secrets.token_hex(8), "at": time.time(), "kind": kind, "user": _clean(user, 200),
            "composition": result.composition, "level": str(Level.parse(level)), "wikis": wikis,
            "question": _clean(result.question, MAX_TEXT),
            "searched": _clean(result.searched or result.question, MAX_TEXT),
            "comment": _clean(comment, MAX_COMMENT), "cited": [_location(c) for c in result.citations],
            "unsupported": list(result.unsupported_citations), "turn": turn}


def record_answer(home: Path, result, *, user: str, level: Level | str, turn: str | None = None) -> str | None:
    """Keep a finished answer that was refused, else one with unsupported citations (else nothing):
    its record's id, or None. ``level`` is the composition's. Never raises on an OS error (a read-only
    workspace still answers: a warning is logged)."""
    if not enabled():
        return None
    if result.refused:
        kind = "refused"
    elif result.unsupported_citations:
        kind = "unsupported"
    else:
        return None
    return _keep(home, _record(kind, result, user, level, "", turn))


def vote(home: Path, result, *, user: str, level: Level | str, up: bool, comment: str = "",
         turn: str | None = None) -> str | None:
    """A thumbs up or down on an answer, with an optional comment (cleaned, at most MAX_COMMENT
    characters): the record's id, or None when it was not kept (``WIKIRAG_FEEDBACK=off``, or the
    workspace cannot be written: a warning is logged). With ``turn``, it replaces the same user's
    earlier vote on that turn."""
    if not enabled():
        return None
    return _keep(home, _record("up" if up else "down", result, user, level, comment, turn))


def _keep(home: Path, record: dict) -> str | None:
    path = path_for(home)
    line = (json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8")
    try:
        with filestore.locked(path):
            fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o600)
            try:
                st = os.fstat(fd)
                if st.st_mode & 0o777 != 0o600:
                    os.fchmod(fd, 0o600)
                if st.st_size and os.pread(fd, 1, st.st_size - 1) != b"\n":
                    line = b"\n" + line  # a torn line from a crash: end it, so this record stays whole
                view = memoryview(line)
                while view:
                    view = view[os.write(fd, view):]
                lines = _count(fd, path)
            finally:
                os.close(fd)
            if lines > MAX_RECORDS + SLACK:
                _compact(path)
    except OSError as exc:
        log.warning("feedback cannot be kept in %s (%s)", path.parent, exc.strerror or exc)
        return None
    return record["id"]


def _count(fd: int, path: Path) -> int:
    """The file's lines, reading only what was appended since this process last counted (under the lock)."""
    st = os.fstat(fd)
    inode, size, lines = _seen.get(str(path), (-1, 0, 0))
    if inode != st.st_ino or size > st.st_size:  # compacted or replaced since: count it all
        size, lines = 0, 0
    while size < st.st_size:
        chunk = os.pread(fd, min(st.st_size - size, 1 << 20), size)
        if not chunk:
            break
        lines, size = lines + chunk.count(b"\n"), size + len(chunk)
    _seen[str(path)] = (st.st_ino, size, lines)
    return lines


def _compact(path: Path) -> None:
    """Rewrite the file with its newest MAX_RECORDS live records, atomically (under the caller's lock)."""
    kept = _live(_parse(path.read_bytes()))
    _write(path, kept)
    _seen.pop(str(path), None)


def _write(path: Path, records: list[dict]) -> None:
    """The records as JSON lines, written atomically (:func:`wikirag.filestore.write_text`)."""
    filestore.write_text(path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))


def _parse(data: bytes) -> list[dict]:
    records = []
    for raw in data.splitlines():
        try:
            r = json.loads(raw)
        except ValueError:  # a torn line (a crash mid-write) or a line being written now
            continue
        if isinstance(r, dict) and r.get("kind") in KINDS and isinstance(r.get("at"), (int, float)):
            records.append(r)
    return records


def _live(records: list[dict]) -> list[dict]:
    """The records that count, oldest first: a later vote by the same user on the same turn replaces an
    earlier one; only the newest MAX_RECORDS."""
    kept, voted = [], set()
    for r in reversed(records):
        if r["kind"] in ("up", "down") and r.get("turn"):
            if (r.get("user"), r["turn"]) in voted:
                continue
            voted.add((r.get("user"), r["turn"]))
        kept.append(r)
        if len(kept) >= MAX_RECORDS:
            break
    return kept[::-1]


def records(home: Path) -> list[dict]:
    """Every live record, oldest first (read again only when the file changed)."""
    path = path_for(home)
    try:
        st = path.stat()
    except OSError:
        return []
    key = (st.st_ino, st.st_size, st.st_mtime_ns, MAX_RECORDS)
    hit = _cache.get(str(path))
    if hit is not None and hit[0] == key:
        return hit[1]
    try:
        found = _live(_parse(path.read_bytes()))
    except OSError:
        return []
    _cache[str(path)] = (key, found)
    return found


# the gaps: what the wikis could not answer ---------------------------------------------------------

@dataclass(frozen=True)
class Cited:
    """Where a cited passage is (no text): ``start``/``end``/``line`` are None if its text had changed."""

    n: int
    wiki: str
    path: str
    start: int | None
    end: int | None
    line: int | None
    heading: str


@dataclass(frozen=True)
class Gap:
    """A question a wiki could not answer: refused, cited for what its passages do not hold, or voted
    down. Who asked is not part of it."""

    wiki: str
    id: str
    at: float
    kind: str
    composition: str
    level: str
    question: str
    searched: str
    comment: str
    cited: tuple[Cited, ...]
    unsupported: tuple[int, ...] = ()

    @property
    def when(self) -> dt.datetime:
        return dt.datetime.fromtimestamp(self.at, dt.timezone.utc)

    @property
    def week(self) -> str:
        """Its ISO week, ``2026-W49`` (UTC)."""
        year, week, _ = self.when.isocalendar()
        return f"{year}-W{week:02d}"

    def to_dict(self) -> dict:
        """As ``wikirag gaps --json`` prints it (``at`` an ISO time, UTC)."""
        return {"wiki": self.wiki, "at": self.when.isoformat(timespec="seconds"), "kind": self.kind,
                "composition": self.composition, "question": self.question, "searched": self.searched,
                "comment": self.comment, "cited": [asdict(c) for c in self.cited],
                "unsupported": list(self.unsupported)}


def _level(value: object) -> Level:
    try:
        return Level.parse(str(value))
    except LevelError:  # an unreadable level: fail closed
        return Level.RESTRICTED


def _cited(entries: object) -> list[Cited]:
    out = []
    for c in entries if isinstance(entries, list) else ():
        try:
            out.append(Cited(int(c["n"]), str(c["wiki"]), str(c["path"]), c.get("start"), c.get("end"),
                             c.get("line"), str(c.get("heading") or "")))
        except (KeyError, TypeError, ValueError, AttributeError):
            continue
    return out


def gaps(ws: Workspace, clearance: Level | str, wiki: str | None = None, *,
         kinds: Iterable[str] | None = None) -> list[Gap]:
    """The questions ``wiki`` (else every wiki the caller may see) could not answer, newest first: the
    refused, unsupported and down-voted records (``kinds``: some of those).

    Attribution and visibility: a record belongs to every wiki it searched (its ``wikis``; an answer
    spans them all, so no one of them can be blamed alone), and is one :class:`Gap` under each. It is
    listed under wiki W only for a caller whose clearance is at or above W's effective level *now*
    (:meth:`Workspace.levels`; a wiki that is gone counts as restricted) **and** at or above the
    record's level (the composition's, when asked: the question was asked there, and it and its cited
    passages may concern its higher wikis). Cited locations in wikis above the clearance are dropped.
    Who asked is never shown. An unknown wiki and one above the clearance raise the same
    :class:`NotFound` (nothing tells whether it exists).
    """
    level = Level.parse(clearance)
    levels = ws.levels()
    if wiki is not None and (wiki not in levels or levels[wiki] > level):
        raise NotFound(f"no wiki '{wiki}' that you may see")
    wanted = set(GAP_KINDS if kinds is None else kinds) & set(GAP_KINDS)

    def visible(name: object) -> bool:
        return isinstance(name, str) and levels.get(name, Level.RESTRICTED) <= level

    found = []
    for r in records(ws.home):
        if r["kind"] not in wanted or _level(r.get("level")) > level:
            continue
        cited = tuple(c for c in _cited(r.get("cited")) if visible(c.wiki))
        names = r.get("wikis") if isinstance(r.get("wikis"), list) else []
        for name in dict.fromkeys(n for n in names if isinstance(n, str)):
            if (wiki is None or name == wiki) and visible(name):
                found.append(Gap(name, str(r.get("id", "")), float(r["at"]), r["kind"], str(r.get("composition", "")),
                                 str(r.get("level", "")), str(r.get("question", "")), str(r.get("searched", "")),
                                 str(r.get("comment", "")), cited,
                                 tuple(n for n in r.get("unsupported") or () if isinstance(n, int))))
    found.sort(key=lambda g: (-g.at, g.wiki))
    return found


def weekly(found: Iterable[Gap]) -> list[tuple[str, int]]:
    """How many gaps each ISO week (UTC) has, ``[("2026-W49", 3), ...]``, newest week first."""
    return sorted(Counter(g.week for g in found).items(), reverse=True)
