"""Grounded answers: retrieve, ask a model to answer from the passages only, verify the citations.

::

    stream = answer(ws, "public-help", "How hot should the water be?", clearance="public")
    for text in stream:          # the answer as it is generated
        print(text, end="")
    result = stream.result       # AnswerResult: text, verified citations, passages, usage, timings

The model is, in order: the ``model`` argument, the composition's ``model:``, ``$WIKIRAG_MODEL``, else
:data:`DEFAULT_MODEL`. Two names are built in: ``extractive`` (the passages' most relevant sentences,
verbatim and cited; no model, no key, never invents text) and ``local`` (SmolLM2-135M-Instruct, or the model ``$WIKIRAG_LOCAL_MODEL`` names, served
on 127.0.0.1 by wikirag itself, see :mod:`wikirag.localmodel`). Anything else is a LiteLLM model
string. Retrieval errors (access, unknown composition) raise at once; a model failure does not raise:
the result keeps the passages and says what went wrong in ``error``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from . import about, audit, extractive, feedback, followup, localmodel
from .access import Level
from .composition import Composition
from .errors import ContextTooLong, ModelError
from .llm import ChatStream, check_keys
from .passage import Passage
from .prompt import NO_ANSWER, Citation, build_messages, check_citations
from .followup import Exchange
from .retrieval import SearchResult, audit_fields, check_question, resolve, retrieve, term_shares
from .workspace import Workspace

MODEL_ENV = "WIKIRAG_MODEL"
API_BASE_ENV = "WIKIRAG_API_BASE"
API_KEY_ENV = "WIKIRAG_API_KEY"  # for a self-hosted server that wants one
EXTRACTIVE = "extractive"
MAX_LINKING = 3  # passages added to an answer's for the links its passages were reached through
LOCAL = "local"
DEFAULT_MODEL = EXTRACTIVE


@dataclass
class AnswerResult:
    """Everything about one answer. ``citations`` are verified and carry exact source offsets."""

    question: str
    composition: str
    model: str
    text: str = ""
    citations: list[Citation] = field(default_factory=list)
    invalid_citations: list[int] = field(default_factory=list)
    unsupported_citations: list[int] = field(default_factory=list)  # valid [n] whose passage lacks the statement
    uncited: list[int] = field(default_factory=list)
    passages: list[Passage] = field(default_factory=list)
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cost: float | None = None
    retrieval_seconds: float = 0.0
    generation_seconds: float = 0.0
    first_token_seconds: float | None = None
    error: str | None = None
    warnings: list[str] = field(default_factory=list)
    unknown_terms: list[str] = field(default_factory=list)  # question terms no wiki searched has (retrieval's)
    searched: str = ""  # the question as searched: the standalone rewrite of a follow-up, else the question
    rewrite: str = "none"  # how `searched` was made: "none", "offline", "model" (a condensing call), "about"
    rewrite_seconds: float = 0.0
    wikis: list[str] = field(default_factory=list)  # the wikis the composition searched
    # each wiki's routing for the question, {"wiki", "weight", "offset"} (retrieval's ``routing``; empty
    # for one wiki or a fusion that does not route)
    routing: list[dict] = field(default_factory=list)

    @property
    def refused(self) -> bool:
        """True when the answer says the passages do not hold it (or nothing matched at all)."""
        return not self.passages or NO_ANSWER.lower() in self.text.lower()

    def to_dict(self) -> dict:
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["passages"] = [p.to_dict() for p in self.passages]
        data["citations"] = [c.to_dict() for c in self.citations]
        return data

    @classmethod
    def from_dict(cls, data: dict) -> AnswerResult:
        """The result :meth:`to_dict` gave, citations re-attached to their passages (a kept conversation)."""
        known = {f.name: data[f.name] for f in fields(cls)
                 if f.name in data and f.name not in ("passages", "citations")}
        result = cls(**known, passages=[Passage.from_dict(p) for p in data.get("passages") or ()])
        result.citations = [Citation(c["n"], result.passages[c["n"] - 1]) for c in data.get("citations") or ()
                            if isinstance(c.get("n"), int) and 1 <= c["n"] <= len(result.passages)]
        return result


class Answer:
    """An answer being generated: iterate for text chunks, then read :attr:`result`.

    :attr:`partial` is the same result object as it stands now (model, passages and warnings are set
    from the start; text and citations fill in as the answer is generated), without waiting.
    """

    def __init__(self, result: AnswerResult, api_base: str | None, timeout: float,
                 on_done: Callable[[AnswerResult], None] | None = None, history: Sequence[Exchange] = (),
                 composition: Composition | None = None):
        self._result, self._api_base, self._timeout = result, api_base, timeout
        self._on_done = on_done
        self._history = list(history)
        self._composition = composition  # for a question about the knowledge base itself
        self._done = False

    @property
    def partial(self) -> AnswerResult:
        """The result so far, without generating anything."""
        return self._result

    @property
    def done(self) -> bool:
        """True once the answer is complete (or failed): :attr:`result` then returns at once."""
        return self._done

    @property
    def result(self) -> AnswerResult:
        """The complete result: generates the rest of the answer first if needed."""
        if not self._done:
            for _ in self:
                pass
        return self._result

    def __iter__(self) -> Iterator[str]:
        if self._done:
            return
        r = self._result
        started = time.perf_counter()
        try:
            if not r.passages:
                r.text = "No passage matched the question, so there is nothing to answer from."
                yield r.text
            elif r.model == EXTRACTIVE and r.rewrite == "about" and self._composition is not None:
                r.text = about.extractive_answer(r.question, self._composition, r.passages)
                r.first_token_seconds = time.perf_counter() - started
                yield r.text
            elif r.model == EXTRACTIVE:
                own, carried = (followup.parts(r.searched, r.question) if r.rewrite == "offline"
                                else (r.searched or r.question, ""))
                r.text = extractive.extract(own, r.passages, unknown=r.unknown_terms, topic=carried)[0]
                r.first_token_seconds = time.perf_counter() - started
                yield r.text
            else:
                yield from self._generate(started)
        except ModelError as exc:
            r.error = str(exc)
        finally:
            r.generation_seconds = time.perf_counter() - started
            check = check_citations(r.text, r.passages)
            r.citations, r.invalid_citations, r.uncited = check.citations, check.invalid, check.uncited
            r.unsupported_citations = check.unsupported
            self._done = True
            if self._on_done is not None:
                self._on_done(r)

    def _generate(self, started: float) -> Iterator[str]:
        r = self._result
        model, api_base, api_key = endpoint(r.model, self._api_base)
        max_tokens, local = None, r.model == LOCAL
        if local:
            max_tokens = localmodel.MAX_ANSWER_TOKENS  # a small model can repeat itself without end
        passages = r.passages
        while True:
            extra = localmodel.request_options(len(passages)) if local else None
            # the bundled 135M model is given the standalone question alone: earlier turns only confused it
            messages = (build_messages(r.searched or r.question, passages) if local else
                        build_messages(r.question, passages, history=followup.recent(self._history),
                                       searched=r.searched))
            stream = ChatStream(model, messages, api_base=api_base,
                                api_key=api_key, timeout=self._timeout, max_tokens=max_tokens, extra_body=extra)
            parts: list[str] = []
            try:
                for text in (localmodel.drop_repeats(stream) if local else stream):
                    if r.first_token_seconds is None:
                        r.first_token_seconds = time.perf_counter() - started
                    parts.append(text)
                    r.text = "".join(parts)
                    yield text
            except ContextTooLong:
                if parts or len(passages) == 1:
                    raise
                passages = passages[: len(passages) // 2]
                r.warnings.append(f"the prompt did not fit the model: retried with {len(passages)} passage(s)")
                continue
            r.passages = passages
            r.prompt_tokens, r.completion_tokens, r.cost = (
                stream.usage.prompt_tokens, stream.usage.completion_tokens, stream.usage.cost)
            return


def endpoint(model: str, api_base: str | None) -> tuple[str, str | None, str | None]:
    """(LiteLLM model string, api_base, api_key) to call for ``model``: the local model is started if
    needed; a hosted model's key variable is checked before any network call."""
    if model == LOCAL:
        server = localmodel.ensure_running()
        return server.litellm_model, server.api_base, server.key
    if api_base:  # self-hosted servers often need no key, but OpenAI-style clients insist on one
        return model, api_base, os.environ.get(API_KEY_ENV) or os.environ.get("OPENAI_API_KEY") or "none"
    check_keys(model, api_base)
    return model, api_base, None


def standalone(workspace: Workspace, comp: Composition, question: str, history: Sequence[Exchange], model: str,
               api_base: str | None, timeout: float) -> tuple[str, str, list[str]]:
    """``question`` made standalone from ``history`` (:mod:`wikirag.followup`): (searched, how, warnings).
    ``how`` is "none" (no earlier turn, or it needed none), "offline" or "model" (a condensing call to a
    LiteLLM model; when that fails the offline rewrite is used, with a warning)."""
    if not history:
        return question, "none", []

    def shares(terms: list[str]) -> dict[str, float]:
        return term_shares(workspace, comp, terms)

    warnings: list[str] = []
    if model not in (EXTRACTIVE, LOCAL):
        try:
            name, base, key = endpoint(model, api_base)
            stream = ChatStream(name, followup.condense_messages(question, history), api_base=base, api_key=key,
                                timeout=timeout, max_tokens=followup.CONDENSE_TOKENS)
            condensed = followup.clean_condensed("".join(stream), question)
            if condensed is not None:
                return condensed, ("none" if condensed == question else "model"), warnings
            warnings.append("the model did not rewrite the follow-up as a question: the earlier turn's topic "
                            "words were added instead")
        except ModelError as exc:
            warnings.append(f"the follow-up could not be rewritten by the model ({exc}): the earlier turn's "
                            "topic words were added instead")
    searched = followup.rewrite(question, history, shares)
    return searched, ("none" if searched == question else "offline"), warnings


def resolve_model(composition: Composition, model: str | None, api_base: str | None) -> tuple[str, str | None]:
    """The model and api_base to use: argument, else the composition's, else the environment, else default."""
    chosen = model or composition.spec.model or os.environ.get(MODEL_ENV) or DEFAULT_MODEL
    base = api_base or composition.spec.api_base or os.environ.get(API_BASE_ENV) or None
    return chosen, base


def answer(workspace: Workspace, composition: str | Path | Composition, question: str, *,
           clearance: Level | str, model: str | None = None, api_base: str | None = None,
           k: int | None = None, fusion: str | None = None, timeout: float = 60.0,
           user: str | None = None, history: Sequence[Exchange] | None = None) -> Answer:
    """Retrieve passages for ``question`` now (raising on access or composition errors) and return an
    :class:`Answer` that generates the grounded answer when iterated. The composition is resolved and
    checked once (:func:`~wikirag.retrieval.resolve`) and that result is what is searched. The finished
    answer is recorded in the audit log (passage ids and cited ids, no text).

    ``history`` is the conversation before this turn, oldest first (:class:`~wikirag.followup.Exchange`:
    question, searched, answer; e.g. ``Exchange.of(r)`` of earlier results). A
    follow-up is then searched as its standalone form (:func:`standalone`), kept in ``result.searched``,
    and a LiteLLM model also sees the recent turns. The caller passes only turns the user may still see
    (:meth:`wikirag.conversations.Kept.history` does)."""
    started = time.perf_counter()
    level = Level.parse(clearance)
    who = user or audit.default_user()
    comp = resolve(workspace, composition, level, who)
    chosen, base = resolve_model(comp, model, api_base)
    question = check_question(question)
    history = list(history or ())
    rewriting = time.perf_counter()
    if about.is_about(question):  # "What can I ask?": the knowledge base's own descriptions answer it
        searched, how, rewrite_warnings = question, "about", []
        listed = about.passages(workspace, comp, level)
        found = SearchResult(question, comp.name, listed, seconds=time.perf_counter() - started, wikis=list(comp.names))
    else:
        searched, how, rewrite_warnings = standalone(workspace, comp, question, history, chosen, base, timeout)
        found = None
    rewrite_seconds = time.perf_counter() - rewriting if how != "about" else 0.0
    if found is None:
        found = retrieve(workspace, comp, searched, clearance=level, k=k, fusion=fusion, user=who, started=started)
    # a passage whose text is no longer in its file is never handed to a model nor cited
    usable = [p for p in found.passages if p.state != "changed"]
    # and the passages holding the links a returned one was reached through: the answer cites them to
    # show the hop ("Egret resizes photos with Tufa [1] … up to 40 MB [2]")
    usable += [p for p in found.linking if p.state != "changed"][:MAX_LINKING]
    warnings = rewrite_warnings + list(found.warnings)
    if len(usable) < len(found.passages):
        gone = sorted({f"{p.wiki}/{p.path}" for p in found.passages if p.state == "changed"})
        warnings.append(f"{len(found.passages) - len(usable)} passage(s) left out: their text is no longer in "
                        f"{', '.join(gone)} (changed since the build)")
    result = AnswerResult(question, comp.name, chosen, passages=usable, warnings=warnings,
                          retrieval_seconds=found.seconds - rewrite_seconds, unknown_terms=found.unknown_terms,
                          searched=searched, rewrite=how, rewrite_seconds=rewrite_seconds, wikis=list(found.wikis),
                          routing=[asdict(r) for r in found.routing])

    def done(r: AnswerResult) -> None:
        audit.record(workspace.home, "answer", **audit_fields(found, who, level), model=r.model,
                     cited=[audit.passage_id(c.passage) for c in r.citations], error=r.error)
        feedback.record_answer(workspace.home, r, user=who, level=comp.level)  # a refusal is a gap to see

    return Answer(result, base, timeout, on_done=done, history=history, composition=comp)
