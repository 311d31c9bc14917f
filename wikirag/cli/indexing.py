"""``wikirag build``, ``list`` and ``check``: make indexes, and say what there is and what is wrong."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import click

from .. import index as index_mod
from ..access import LEVEL_NAMES, Level
from ..config import read_yaml
from ..errors import ManifestError, NotFound, WikiragError
from ..wiki import GLOB_CHARS, MANIFEST_NAME, Wiki, write_manifest
from ..workspace import Workspace
from .common import clearance_option, workspace


def _source_for_manifest(source: str, folder: Path, home: Path) -> str:
    """SOURCE as the manifest stores it: relative to the wiki folder when it lies inside the workspace
    (so the workspace can move), else absolute. A glob part is kept as given."""
    parts = Path(os.path.expanduser(source)).parts
    magic = next((i for i, p in enumerate(parts) if GLOB_CHARS.search(p)), len(parts))
    base = Path(*parts[:magic]) if magic else Path(".")
    rest = "/".join(parts[magic:])
    absolute = base.resolve()
    if not absolute.is_dir():
        raise click.UsageError(f"SOURCE {source}: folder {absolute} does not exist")
    inside = absolute == home or home in absolute.parents
    stored = Path(os.path.relpath(absolute, folder.resolve()) if inside else absolute).as_posix()
    return f"{stored}/{rest}" if rest else stored


def _update_manifest(ws: Workspace, name: str, source: str | None, tags: tuple[str, ...],
                     sensitivity: str | None, title: str | None) -> None:
    folder = ws.wiki_folder(name)
    path = folder / MANIFEST_NAME
    if path.exists():
        data, _ = read_yaml(path, ManifestError, "")
    else:
        if not sensitivity:
            raise click.UsageError(
                f"wiki '{name}' does not exist yet: give --sensitivity ({', '.join(LEVEL_NAMES)}) to create it"
            )
        data = {"name": name, "title": title or name.replace("-", " ").replace("_", " ").capitalize()}
    folder.mkdir(parents=True, exist_ok=True)
    if source is not None:
        data["source"] = _source_for_manifest(source, folder, ws.home)
    if tags:
        data["include_tags"] = list(tags)
    if sensitivity:
        data["sensitivity"] = sensitivity
    if title:
        data["title"] = title
    write_manifest(folder, data)


def _changed_paths(wiki: Wiki, given: tuple[str, ...]) -> list[str]:
    """``--changed`` paths as the build takes them: relative to the wiki's source folder, ``/``-separated
    (an absolute path must lie inside that folder)."""
    import posixpath

    root = wiki.source_spec().root
    out = []
    for raw in given:
        path = Path(raw).expanduser()
        if path.is_absolute():
            try:
                path = path.resolve().relative_to(root.resolve())
            except ValueError:
                raise click.UsageError(f"--changed {raw}: not inside wiki '{wiki.name}''s source folder {root}") from None
        rel = posixpath.normpath(path.as_posix())
        if rel == "." or rel.startswith("../"):
            raise click.UsageError(f"--changed {raw}: give a page's path relative to the source folder {root}")
        out.append(rel)
    return out


def _build_one(wiki: Wiki, force: bool, as_json: bool, changed: tuple[str, ...] | None = None) -> dict:
    bars: dict[str, object] = {}

    def progress(stage: str, done: int, total: int) -> None:
        bar = bars.get(stage)
        if bar is None and (total >= 200 or stage == "embedding") and total and not as_json:
            bar = bars[stage] = click.progressbar(length=total, label=f"{wiki.name}: {stage}", file=sys.stderr)
            bar.__enter__()
        if bar is not None:
            bar.update(done - bar.pos)

    try:
        report = index_mod.build(wiki, force=force, progress=progress, changed=changed)
    finally:
        for bar in bars.values():
            bar.__exit__(None, None, None)
    if not as_json:
        verb = "up to date" if report.state == "up to date" else (
            f"updated ({report.rechunked} file(s) chunked, the rest kept)" if report.update
            else f"built ({report.rechunked} file(s) chunked)")
        click.echo(f"{wiki.name}: {verb}: {report.files} files, {report.chunks} chunks, "
                   f"{len(report.skipped)} skipped, {report.seconds:.2f} s")
        for skip in report.skipped:
            click.echo(f"  skipped {skip.path}: {skip.reason}")
        for warning in report.warnings:
            click.echo(f"  warning: {warning}", err=True)
    return {"wiki": wiki.name, "state": report.state, "files": report.files, "chunks": report.chunks,
            "rechunked": report.rechunked, "seconds": round(report.seconds, 3), "build_id": report.build_id,
            "update": report.update, "skipped": [{"path": s.path, "reason": s.reason} for s in report.skipped], "warnings": report.warnings}


@click.command()
@click.argument("name", required=False)
@click.argument("source", required=False)
@click.option("--tag", "tags", multiple=True, help="Index only files with this tag, e.g. '#wiki/Topic' (repeatable).")
@click.option("--sensitivity", type=click.Choice(LEVEL_NAMES), help="The wiki's level (required to create one).")
@click.option("--title", help="The wiki's title (when creating or updating its manifest).")
@click.option("--all", "build_all", is_flag=True, help="Build every wiki of the workspace.")
@click.option("--force", is_flag=True, help="Re-chunk every file, even unchanged ones.")
@click.option("--json", "as_json", is_flag=True, help="Print the build reports as JSON.")
@click.option("--changed", "changed", multiple=True, metavar="PATH",
              help="Only this page changed (a path relative to the wiki's source folder; repeatable): update the "
                   "index with it alone, in time that grows with the change, not with the wiki.")
@click.pass_context
def build(ctx, name, source, tags, sensitivity, title, build_all, force, as_json, changed):
    """Build (or update) the index of a wiki, or of every wiki with --all.

    With SOURCE (a folder or glob of markdown elsewhere, e.g. an Obsidian vault), first create or
    update wikis/NAME/.wiki.yaml to read from it. Builds are incremental and atomic: unchanged files
    are not re-chunked, and a failed build leaves the previous index serving.

    With --changed PATH (repeatable), only those pages are read, and the index is updated with them as a
    delta beside the last full build (for scripts and hooks that know what they changed; the watcher does
    the same). A later build without --changed writes everything in full again.

    Example: wikirag build notes ~/vault --tag '#wiki/Topic' --sensitivity internal
    """
    ws = workspace(ctx)
    if build_all and (name or source):
        raise click.UsageError("give either a wiki NAME or --all, not both")
    if not build_all and not name:
        raise click.UsageError("give a wiki NAME to build, or --all")
    if changed and (build_all or force):
        raise click.UsageError("--changed updates one wiki with the pages given: not with --all or --force")
    if name and (source is not None or tags or sensitivity or title):
        _update_manifest(ws, name, source, tags, sensitivity, title)
    names = ws.wiki_names() if build_all else [name]
    if not names:
        raise NotFound(f"no wikis in {ws.wikis_dir}: create one with 'wikirag build NAME SOURCE --sensitivity LEVEL'")
    reports, failures = [], []
    for wiki_name in names:
        try:
            wiki = ws.wiki(wiki_name)
            reports.append(_build_one(wiki, force, as_json, _changed_paths(wiki, changed) if changed else None))
        except WikiragError as exc:
            if not build_all:
                raise
            failures.append(f"{wiki_name}: {exc}")
            click.echo(f"Error: {exc}", err=True)
    if as_json:
        click.echo(json.dumps({"built": reports, "failed": failures}, indent=2, ensure_ascii=False))
    if failures:
        raise click.ClickException(f"{len(failures)} of {len(names)} wiki(s) failed to build (see above)")



@click.command(name="list")
@click.option("--json", "as_json", is_flag=True, help="Print wikis and compositions as JSON.")
@clearance_option
@click.pass_context
def list_(ctx, as_json, clearance):
    """List the wikis and compositions at or below your clearance, with index status.

    Status is fresh, stale (sources changed since the build), missing (never built) or
    incompatible (built by another version: rebuild).

    Example: wikirag list --clearance internal --json
    """
    from ..catalog import listing

    level = Level.parse(clearance)
    found = listing(workspace(ctx), level)
    for problem in found.problems:
        click.echo(f"warning: {problem}", err=True)
    wikis = []
    for info in found.wikis:
        m, state = info.wiki.manifest, info.status
        wikis.append({"name": info.name, "title": m.title, "description": m.description, "tags": m.tags,
                      "sensitivity": str(info.level), "files": state.files, "chunks": state.chunks,
                      "status": state.state, "built_at": state.built_at, "detail": state.detail,
                      "dense": state.dense, "graph": m.layers.graph is not None, "links": state.links,
                      "dangling_links": state.dangling, "level_changed": state.level_changed})
    comps = [{"name": c.name, "description": c.spec.description, "sensitivity": str(c.level),
              "wikis": [w.name for w in c.wikis]} for c in found.compositions]
    hidden = found.hidden
    if as_json:
        click.echo(json.dumps({"wikis": wikis, "compositions": comps, "hidden": hidden}, indent=2, ensure_ascii=False))
        return
    click.echo("WIKIS")
    for w in wikis:
        dense = (f" +dense({w['dense']})" if w["dense"] else "") + (" +graph" if w["graph"] else "")
        click.echo(f"  {w['name']:<24} {w['sensitivity']:<13} {w['files']:>5} files {w['chunks']:>6} chunks  "
                   f"{w['status']:<8} {w['title']}{dense}")
    click.echo("COMPOSITIONS")
    for c in comps:
        click.echo(f"  {c['name']:<24} {c['sensitivity']:<13} {', '.join(c['wikis'])}")
    if hidden:
        click.echo(f"({hidden} wiki(s) or composition(s) above clearance {level} not shown)", err=True)


@click.command()
@click.pass_context
def check(ctx):
    """Validate every wiki manifest and composition; list every problem, exit 1 if any.

    An operator's command: it names wikis and compositions of every level, in full detail. Wikis of
    different levels whose sources overlap are problems (both are treated as the higher level).
    Indexes that are missing or stale, and links between pages that lead nowhere (dangling, checked
    against the serving builds), are noted on stderr but do not fail the check.

    Example: wikirag check && echo all good
    """
    from .. import checks

    report = checks.run(workspace(ctx))
    click.echo(f"({checks.OPERATOR_NOTE})", err=True)
    for line in report.notes:
        click.echo(f"note: {line}", err=True)
    if report.problems:
        for problem in report.problems:
            click.echo(problem, err=True)
        raise click.ClickException(f"{len(report.problems)} problem(s) found")
    click.echo(f"ok: {report.wikis} wikis, {report.compositions} compositions")


@click.command()
@click.argument("names", nargs=-1)
@click.option("--debounce", type=click.IntRange(50, 10_000), default=400, show_default=True,
              help="Milliseconds of quiet that end a burst of saves.")
@click.pass_context
def watch(ctx, names, debounce):
    """Watch the wikis' sources (all, or NAMES) and rebuild each one that changes, incrementally.

    One line per rebuild: wiki, files changed, seconds. A changed .wiki.yaml or composition is
    validated first: an invalid one is reported and the previous index keeps serving. Ctrl-C stops.

    Example: wikirag watch engineering-handbook wikirag-guide
    """
    from wikirag.watch import Watcher

    ws = workspace(ctx)
    for name in names:
        ws.wiki(name)  # an unknown name fails now, with the names there are
    watcher = Watcher(ws, names or None, debounce_ms=debounce)
    click.echo(f"watching {len(watcher.wiki_names())} wiki(s) in {ws.home} (Ctrl-C stops)", err=True)
    try:
        watcher.run()
    except KeyboardInterrupt:
        pass
