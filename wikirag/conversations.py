"""Kept conversations: each user's chats, held on the server beside the sign-in sessions.

A user's conversations are in ``<workspace>/.sessions/conversations/<sha256(user name)[:32]>.json`` (mode
0600, in a 0700 folder; the file name says nothing of the user, the browser holds no conversation, only
its sign-in token, :mod:`wikirag.sessions`). Every change is a read-modify-write under
:func:`wikirag.filestore.locked` with an atomic :func:`~wikirag.filestore.write_json`, so app processes
writing one user's file at once lose nothing. A turn keeps the whole :class:`~wikirag.answers.AnswerResult`
(question, searched form, answer, passages, verified citations), the level of the composition asked, when,
and the user's vote. The sidebar lists them newest-updated first; a title is the first question
(whitespace collapsed, at most :data:`TITLE_CHARS` characters) until renamed; the conversation last
started, answered in or opened is *current*, so a reload or a new tab resumes it.

What is shown is checked against the user's clearance *now*, on every load, never when it was kept: a
turn is shown only if its stored level is at or below the clearance, its composition (when a named one;
an ad-hoc one is named ``ad-hoc``) still resolves for that clearance, and every wiki it searched or cites
has an effective level at or below it (a wiki that is gone counts as restricted: fail closed). Any other
turn is hidden: its question, answer and passages are not returned, and the conversation carries a note
saying how many are hidden, in general words. A title taken from a hidden turn, and the name of a
composition the user may no longer use, are not shown either. A named composition whose file is gone
hides its turns. Nothing a follow-up sees (:meth:`Kept.history`) or an export holds comes from a hidden turn.

Bounds, so a file stays quick to read on every page load:

* at most :data:`MAX_CONVERSATIONS` (50) per user: the least recently updated one goes;
* at most :data:`MAX_TURNS` (100) per conversation: the oldest turn goes;
* a user's file under :data:`MAX_BYTES` (4 MB): whole conversations go, least recently updated first, then
  the oldest turns of the one being changed; a single turn above :data:`MAX_TURN_BYTES` has its passages'
  texts cut (ending ``…``; their offsets still say where the whole passage is).

A damaged or unreadable file is not fatal: it reads as no conversations and the next change replaces it.
On a read-only workspace a change is logged as a warning and not kept; nothing raises, the chat answers.
"""

from __future__ import annotations

import hashlib
import json
import logging
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from . import filestore
from .access import Level
from .answers import AnswerResult
from .errors import NotFound, QueryError, WikiragError
from .followup import Exchange
from .prompt import label
from .workspace import Workspace

MAX_CONVERSATIONS = 50
MAX_TURNS = 100
MAX_BYTES = 4 * 1024 * 1024
MAX_TURN_BYTES = 256 * 1024
TITLE_CHARS = 60  # an automatic title: the first question, cut here
MAX_TITLE = 80  # a title the user gives
MAX_COMMENT = 2000
NEW_TITLE = "New conversation"
UNTITLED = "Untitled conversation"  # its title came from a turn that is now hidden, and no turn is shown
ADHOC = "ad-hoc"  # the name Workspace.adhoc gives a composition made on the spot
VOTES = ("up", "down", None)
log = logging.getLogger("wikirag.webapp")


@dataclass(frozen=True)
class Summary:
    """A conversation as the sidebar lists it (``composition`` None: one the user may no longer use)."""

    id: str
    title: str
    composition: str | None
    created: float
    updated: float
    turns: int


@dataclass(frozen=True)
class KeptTurn:
    """One kept turn; a hidden one has ``result``, ``level`` and ``feedback`` None and an empty comment."""

    id: str
    result: AnswerResult | None
    level: Level | None
    feedback: str | None
    comment: str
    hidden: bool
    at: float = 0.0


@dataclass(frozen=True)
class Kept:
    """A conversation as loaded at a clearance: its turns (hidden ones without content) and the note."""

    id: str
    title: str
    composition: str | None
    turns: list[KeptTurn]
    hidden: int
    note: str | None

    def history(self, at_most: Level | str | None = None) -> list[Exchange]:
        """The visible turns as a follow-up sees them (a hidden turn is never given to one). ``at_most``: only
        turns asked at or below that level — the level of the composition the follow-up is asked in, so no
        word of a confidential turn is carried into a public composition's searched question (which its
        gaps view may show to public users)."""
        limit = Level.parse(at_most) if at_most is not None else None
        return [Exchange.of(t.result) for t in self.turns
                if t.result is not None and (limit is None or (t.level is not None and t.level <= limit))]


def _one_line(text: object) -> str:
    return " ".join(str(text or "").split())


def _auto_title(question: str) -> str:
    text = _one_line(question)
    return (text[: TITLE_CHARS - 1].rstrip() + "…" if len(text) > TITLE_CHARS else text) or UNTITLED


def _given_title(title: object) -> str:
    text = _one_line(title)[:MAX_TITLE].rstrip() if isinstance(title, str) else ""
    if not text:
        raise QueryError(f"a conversation's title cannot be empty: give it a name of up to {MAX_TITLE} characters")
    return text


def _num(value: object) -> float:
    return float(value) if isinstance(value, (int, float)) else 0.0


def _size(obj: object) -> int:
    return len(json.dumps(obj, ensure_ascii=False).encode("utf-8"))


def _facts(turn: dict) -> dict:
    """What decides whether a turn may be shown: its level, its composition, every wiki it touched."""
    wikis, passages = turn.get("wikis", []), turn.get("passages", [])
    if not isinstance(wikis, list) or not isinstance(passages, list):
        return {"level": None}  # damaged: never shown
    touched = [*wikis, *(p.get("wiki") if isinstance(p, dict) else None for p in passages)]
    if turn.get("composition") != ADHOC:  # "": the composition's own file (wikirag.about), checked with it
        touched = [w for w in touched if w != ""]
    return {"level": turn.get("level"), "composition": turn.get("composition"), "wikis": touched}


def _clean(data: object) -> dict:
    """A user's file as read, with anything damaged left out."""
    data = data if isinstance(data, dict) else {}
    convs = data.get("conversations")
    convs = {k: v for k, v in convs.items() if isinstance(v, dict) and isinstance(v.get("turns"), list)
             } if isinstance(convs, dict) else {}
    current = data.get("current")
    return {"version": 1, "conversations": convs,
            "current": current if isinstance(current, str) and current in convs else None}


def _cut(turn: dict) -> None:
    """Cut a turn's passages' texts (then its own texts) until the turn fits :data:`MAX_TURN_BYTES`."""
    if _size(turn) <= MAX_TURN_BYTES:
        return
    passages = [p for p in turn.get("passages") or () if isinstance(p, dict) and isinstance(p.get("text"), str)]
    limit = MAX_TURN_BYTES // (2 * max(1, len(passages)))
    while _size(turn) > MAX_TURN_BYTES and limit >= 100:
        for p in passages:
            if len(p["text"]) > limit:
                p["text"] = p["text"][:limit] + " …"
        limit //= 2
    for key in ("text", "question", "searched"):
        if _size(turn) > MAX_TURN_BYTES and isinstance(turn.get(key), str):
            turn[key] = turn[key][: MAX_TURN_BYTES // 8] + " …"
    turn["cut"] = True


def _fit(data: dict, keep: str | None) -> None:
    """Apply the bounds (module docstring), never dropping conversation ``keep`` (the one changed)."""
    convs = data["conversations"]
    for conv in convs.values():
        del conv["turns"][:-MAX_TURNS]
    oldest = sorted((c for c in convs if c != keep), key=lambda c: (_num(convs[c].get("updated")), c))
    while len(convs) > MAX_CONVERSATIONS and oldest:
        del convs[oldest.pop(0)]
    total = _size(data)  # what is dropped is subtracted without its separators: an overestimate
    while total >= MAX_BYTES and oldest:
        total -= _size(convs.pop(oldest.pop(0)))
    turns = convs[keep]["turns"] if keep in convs else []
    while total >= MAX_BYTES and len(turns) > 1:
        total -= _size(turns.pop(0))
    if data["current"] not in convs:
        data["current"] = None


class _Check:
    """Whether kept things may be shown at ``clearance`` now (the workspace looked up once per load)."""

    def __init__(self, ws: Workspace, clearance: Level | str):
        self.ws, self.clearance = ws, Level.parse(clearance)
        self.levels = ws.levels()
        self.named = set(ws.composition_names())
        self._resolves: dict[str, bool] = {}

    def composition(self, name: object) -> bool:
        if not isinstance(name, str):
            return False
        if name not in self.named:
            return name == ADHOC  # a named composition whose file is gone: not shown
        if name not in self._resolves:
            try:
                self.ws.composition(name, self.clearance)
                self._resolves[name] = True
            except WikiragError:  # above the clearance, broken, or a wiki in it now above its ceiling
                self._resolves[name] = False
        return self._resolves[name]

    def allows(self, facts: dict) -> bool:
        try:
            level = Level.parse(facts.get("level"))
        except WikiragError:
            return False
        if level > self.clearance or not self.composition(facts.get("composition")):
            return False
        return all(isinstance(w, str) and self.levels.get(w, Level.RESTRICTED) <= self.clearance
                   for w in facts.get("wikis", ()))


def _shown_title(conv: dict, check: _Check | None) -> str:
    title = str(conv.get("title") or NEW_TITLE)
    if check is None or conv.get("renamed") or not isinstance(conv.get("title_facts"), dict):
        return title
    if check.allows(conv["title_facts"]):
        return title
    first = next((t for t in conv["turns"] if isinstance(t, dict) and check.allows(_facts(t))), None)
    return _auto_title(first.get("question", "")) if first else UNTITLED


def _shown_composition(conv: dict, check: _Check | None) -> str | None:
    name = conv.get("composition")
    return (name if check is None or check.composition(name) else None) if isinstance(name, str) else None


def _note(hidden: int) -> str | None:
    if not hidden:
        return None
    if hidden == 1:
        return "1 earlier turn is hidden: it used a composition or wiki you may no longer use."
    return f"{hidden} earlier turns are hidden: they used a composition or wiki you may no longer use."


class ConversationStore:
    """The kept conversations of one workspace's app (see the module docstring)."""

    def __init__(self, home: Path):
        self.home = Path(home)
        self.folder = self.home / ".sessions" / "conversations"

    def _path(self, user: str) -> Path:
        return self.folder / (hashlib.sha256(user.encode("utf-8", "surrogatepass")).hexdigest()[:32] + ".json")

    def _read(self, user: str) -> dict:
        return _clean(filestore.read_json(self._path(user), {}))

    def _change(self, user: str, change: Callable[[dict], bool], keep: str | None, what: str) -> None:
        """Run ``change`` on the user's file under its lock and write it back (unless it returns False)."""
        path = self._path(user)
        try:
            self.folder.parent.mkdir(mode=0o700, exist_ok=True)
            self.folder.mkdir(mode=0o700, exist_ok=True)
            with filestore.locked(path):
                data = _clean(filestore.read_json(path, {}))
                if change(data) is False:
                    return
                _fit(data, keep)
                filestore.write_json(path, data)
        except OSError as exc:  # a read-only workspace: not kept, nothing else fails
            log.warning("conversations cannot be kept in %s (%s): %s is not kept", self.folder,
                        exc.strerror or exc, what)

    @staticmethod
    def _get(data: dict, conv_id: object) -> dict:
        conv = data["conversations"].get(conv_id) if isinstance(conv_id, str) else None
        if conv is None:
            raise NotFound(f"no conversation {conv_id!r}: it was deleted, or dropped as one of the oldest")
        return conv

    @staticmethod
    def _stamp(data: dict) -> float:
        """Now, and later than every stamp in the file (so the order of changes is never a tie)."""
        latest = max((_num(c.get("updated")) for c in data["conversations"].values()), default=0.0)
        return max(time.time(), latest + 1e-6)

    def conversations(self, user: str, ws: Workspace | None = None,
                      clearance: Level | str | None = None) -> list[Summary]:
        """The user's conversations, newest-updated first. With ``ws`` and ``clearance`` (what a sidebar
        shown to the user passes), titles, compositions and turn counts are as that clearance may see now."""
        if (ws is None) != (clearance is None):
            raise QueryError("pass both the workspace and the clearance, or neither")
        check = _Check(ws, clearance) if ws is not None and clearance is not None else None
        out = []
        for cid, conv in self._read(user)["conversations"].items():
            turns = [t for t in conv["turns"] if isinstance(t, dict)]
            count = len(turns) if check is None else sum(check.allows(_facts(t)) for t in turns)
            out.append(Summary(cid, _shown_title(conv, check), _shown_composition(conv, check),
                               _num(conv.get("created")), _num(conv.get("updated")), count))
        return sorted(out, key=lambda s: (s.updated, s.created), reverse=True)

    def new(self, user: str, composition: str, title: str | None = None) -> str:
        """Start a conversation with ``composition`` (made current); its id."""
        given = _given_title(title) if title is not None else None
        cid = secrets.token_hex(8)

        def change(data: dict) -> bool:
            nonlocal cid
            while cid in data["conversations"]:
                cid = secrets.token_hex(8)
            stamp = self._stamp(data)
            data["conversations"][cid] = {"id": cid, "title": given or NEW_TITLE, "renamed": given is not None,
                                          "composition": str(composition), "created": stamp, "updated": stamp,
                                          "turns": []}
            data["current"] = cid
            return True

        self._change(user, change, cid, "a new conversation")
        return cid

    def add_turn(self, user: str, conv_id: str, result: AnswerResult, level: Level | str) -> str:
        """Keep ``result`` as the next turn of ``conv_id`` (made current), asked of a composition of
        ``level``; the turn's id. Raises NotFound for an unknown conversation (e.g. deleted in another tab)."""
        turn = {**result.to_dict(), "id": secrets.token_hex(8), "at": time.time(), "level": str(Level.parse(level))}
        _cut(turn)

        def change(data: dict) -> bool:
            conv = self._get(data, conv_id)
            conv["turns"].append(turn)
            if not conv.get("renamed") and not isinstance(conv.get("title_facts"), dict):
                conv["title"], conv["title_facts"] = _auto_title(result.question), _facts(turn)
            conv["updated"] = self._stamp(data)
            data["current"] = conv_id
            return True

        self._change(user, change, conv_id, "a turn")
        return turn["id"]

    def set_feedback(self, user: str, conv_id: str, turn_id: str, value: str | None, comment: str = "") -> None:
        """Keep the user's vote (``"up"``, ``"down"`` or None to take it back) and comment on a turn."""
        if value not in VOTES:
            raise QueryError(f"a vote is 'up', 'down' or None, not {value!r}")
        comment = str(comment or "").strip()[:MAX_COMMENT]

        def change(data: dict) -> bool:
            conv = self._get(data, conv_id)
            turn = next((t for t in conv["turns"] if isinstance(t, dict) and t.get("id") == turn_id), None)
            if turn is None:
                raise NotFound(f"no turn {turn_id!r} in conversation {conv_id!r}")
            turn["feedback"], turn["comment"] = value, comment
            return True

        self._change(user, change, conv_id, "feedback")

    def rename(self, user: str, conv_id: str, title: str) -> None:
        """Give a conversation the user's own title (whitespace collapsed, at most 80 characters)."""
        given = _given_title(title)

        def change(data: dict) -> bool:
            conv = self._get(data, conv_id)
            conv["title"], conv["renamed"] = given, True
            conv.pop("title_facts", None)
            return True

        self._change(user, change, conv_id, "a title")

    def delete(self, user: str, conv_id: str) -> bool:
        """Delete a conversation; False if there was none of that id."""
        found = False

        def change(data: dict) -> bool:
            nonlocal found
            found = data["conversations"].pop(conv_id, None) is not None if isinstance(conv_id, str) else False
            if data["current"] == conv_id:
                data["current"] = None
            return found

        self._change(user, change, None, "a deletion")
        return found

    def current(self, user: str) -> str | None:
        """The conversation last made current, if it still exists (a reload or a new tab resumes it)."""
        return self._read(user)["current"]

    def set_current(self, user: str, conv_id: str | None) -> None:
        """Make ``conv_id`` current (the sidebar opened it); NotFound for an unknown one. None: no
        conversation is current (the chat's "New conversation", until its first question)."""

        def change(data: dict) -> bool:
            if conv_id is not None:
                self._get(data, conv_id)
            if data["current"] == conv_id:
                return False
            data["current"] = conv_id
            return True

        self._change(user, change, conv_id, "the current conversation")

    def load(self, ws: Workspace, user: str, clearance: Level | str, conv_id: str) -> Kept:
        """Conversation ``conv_id`` as ``clearance`` may see it now (module docstring); NotFound if unknown."""
        conv = self._get(self._read(user), conv_id)
        check = _Check(ws, clearance)
        turns: list[KeptTurn] = []
        for t in conv["turns"]:
            if not isinstance(t, dict):
                continue
            tid, at = str(t.get("id", "")), _num(t.get("at"))
            if not check.allows(_facts(t)):
                turns.append(KeptTurn(tid, None, None, None, "", True, at))
                continue
            try:
                result = AnswerResult.from_dict(t)
            except (TypeError, ValueError, KeyError, AttributeError):
                log.warning("a damaged turn of a kept conversation is left out")
                continue
            feedback = t.get("feedback") if t.get("feedback") in VOTES else None
            turns.append(KeptTurn(tid, result, Level.parse(t["level"]), feedback, str(t.get("comment") or ""),
                                  False, at))
        hidden = sum(t.hidden for t in turns)
        return Kept(conv_id, _shown_title(conv, check), _shown_composition(conv, check), turns, hidden,
                    _note(hidden))

    def export_markdown(self, ws: Workspace, user: str, clearance: Level | str, conv_id: str) -> str:
        """The conversation as ``clearance`` may see it, as a markdown file: each visible turn's question,
        searched form, answer and cited passages (where, and quoted); the note where turns are hidden."""
        kept = self.load(ws, user, clearance, conv_id)
        lines = [f"# {_one_line(kept.title)}", ""]
        if kept.note:
            lines += [f"*{kept.note}*", ""]
        run = 0
        for turn in [*kept.turns, None]:
            if turn is not None and turn.result is None:
                run += 1
                continue
            if run:
                lines += [f"*({run} turn{'s' if run > 1 else ''} hidden here.)*", ""]
                run = 0
            if turn is None:
                break
            r = turn.result
            lines += [f"## {_one_line(r.question) or '(no question)'}", ""]
            if r.searched and _one_line(r.searched) != _one_line(r.question):
                lines += [f"Searched: {_one_line(r.searched)}", ""]
            lines += [r.text.strip() or "(no answer)", ""]
            cited = sorted({c.n: c for c in r.citations}.values(), key=lambda c: c.n)
            if cited:
                lines += ["Sources:", ""]
            for c in cited:
                p = c.passage
                where = "changed since it was cited" if p.state == "changed" else f"characters {p.start}–{p.end}"
                quote = [f"> {line}".rstrip() for line in p.text.strip("\n").splitlines()] or [">"]
                lines += [f"[{c.n}] {label(p)}, {where}", "", *quote, ""]
        return "\n".join(lines).rstrip() + "\n"
