"""``wikirag check``: everything wrong with a workspace, in full detail — an operator's view.

Unlike every other surface, the report names wikis and compositions of every level, with the text of
their manifests' errors: it is for whoever runs the workspace, not for a user with a clearance (the
command says so). Problems fail the check: manifests and compositions that do not load, and wikis of
different levels whose sources overlap (:mod:`wikirag.overlap`: the lower one is treated as the
higher). Notes do not: indexes missing, stale or incompatible, level changes, dense layers built with
another model, pages the serving build skipped (unreadable, not UTF-8, binary, too many blocks: each with
its reason, at most :data:`SKIPPED_SHOWN` per wiki; the rest of the wiki is indexed), dangling links, and
overlaps of wikis of the same level.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from . import index as index_mod
from . import overlap, store
from .errors import WikiragError
from .graph import dangling_report
from .sources import discover
from .workspace import Workspace

SKIPPED_SHOWN = 20  # skipped pages listed per wiki; `wikirag build NAME --json` lists every one
OPERATOR_NOTE = ("operator view: full detail of every wiki and composition, whatever its level "
                 "(other commands show a user only what their clearance allows)")


@dataclass
class CheckReport:
    """What :func:`run` found: ``problems`` fail the check, ``notes`` inform."""

    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    wikis: int = 0
    compositions: int = 0


def _skipped(wiki, build_id: str | None, found: list) -> list[str]:
    """The pages skipped with their reasons — by the serving build (not UTF-8, binary, too many blocks) and
    by the walk of the sources now (``found``: cannot be read, symlinks out) — but not those left out on
    purpose (meta files, pages without an ``include_tags`` tag); at most :data:`SKIPPED_SHOWN`, then how
    many more."""
    try:
        records = store.read_files(store.build_folder(wiki, build_id)) if build_id else {}
    except (OSError, ValueError, WikiragError):
        records = {}  # a damaged build is reported by its status
    reasons = {path: str(r["skipped"]) for path, r in records.items() if r.get("skipped")}
    reasons.update({s.path: s.reason for s in found})
    bad = sorted((path, why) for path, why in reasons.items()
                 if why != "meta file" and not why.startswith("no matching tag"))
    notes = [f"wiki '{wiki.name}': {path} is skipped: {why}" for path, why in bad[:SKIPPED_SHOWN]]
    if len(bad) > SKIPPED_SHOWN:
        notes.append(f"wiki '{wiki.name}': {len(bad) - SKIPPED_SHOWN} more page(s) skipped: "
                     f"'wikirag build {wiki.name} --json' lists every one")
    return notes


def run(ws: Workspace) -> CheckReport:
    """Check every manifest, composition, index and source of the workspace."""
    report = CheckReport(ws.check(), [], len(ws.wiki_names()), len(ws.composition_names()))
    graphs, files = {}, {}
    for name in ws.wiki_names():
        try:
            wiki = ws.wiki(name)
            state = index_mod.status(wiki)
            found = discover(wiki)
            files[name] = {f.abspath.resolve() for f in found.files}
        except WikiragError:
            continue
        if state.state in ("fresh", "stale"):
            try:
                graphs[name] = store.load(wiki).graph
            except WikiragError as exc:
                report.notes.append(str(exc))
            report.notes += _skipped(wiki, state.build_id, found.skipped)
        if state.state != "fresh":
            report.notes.append(f"wiki '{name}' index is {state.state}: {state.detail}")
        if state.level_changed:
            report.notes.append(f"wiki '{name}' changed level since its build ({state.level_changed}): "
                                f"run 'wikirag build {name}'")
        if state.dense in ("missing", "other model"):
            reason = "has none" if state.dense == "missing" else "was built with another model"
            report.notes.append(f"wiki '{name}' declares a dense layer but its index {reason}: "
                                f"run 'wikirag build {name}'")
    report.notes += dangling_report(graphs, ws.wiki_names())
    problems, notes = overlap.report(ws.source_roots(), files)
    report.problems += problems
    report.notes += notes
    return report
