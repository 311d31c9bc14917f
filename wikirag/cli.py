"""The ``wikirag`` command line: build, query, list, check.

Results go to stdout, progress and errors to stderr. Exit codes: 0 success, 1 error (one clear line
per problem, no traceback), 2 usage error. The library raises :class:`WikiragError`; only this module
turns it into an exit code.
"""

from __future__ import annotations

import json
import os
import sys
import textwrap
from pathlib import Path

import click

from . import __version__, store
from . import index as index_mod
from .access import CLEARANCE_ENV, LEVEL_NAMES, Level
from .config import read_yaml
from .errors import ManifestError, NotFound, QueryError, WikiragError
from .retrieval import search
from .wiki import GLOB_CHARS, MANIFEST_NAME, Wiki, write_manifest
from .workspace import HOME_ENV, Workspace

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


class _Group(click.Group):
    """Turns library errors into ``Error: …`` on stderr and exit 1, never a traceback."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except WikiragError as exc:
            raise click.ClickException(str(exc)) from None
        except OSError as exc:
            raise click.ClickException(f"{exc.strerror or exc}: {exc.filename or ''}".rstrip(": ")) from None
        except (click.ClickException, click.exceptions.Exit, click.Abort, KeyboardInterrupt):
            raise
        except Exception as exc:  # a bug: one line, the traceback only on request
            if os.environ.get("WIKIRAG_DEBUG"):
                raise
            raise click.ClickException(
                f"internal error: {type(exc).__name__}: {exc} (set WIKIRAG_DEBUG=1 for the traceback)"
            ) from None


def _workspace(ctx: click.Context) -> Workspace:
    return ctx.obj


clearance_option = click.option(
    "--clearance", type=click.Choice(LEVEL_NAMES), envvar=CLEARANCE_ENV, default="public", show_default=True,
    help=f"Your clearance; you only see what is at or below it (env {CLEARANCE_ENV}).",
)


@click.group(cls=_Group, context_settings=CONTEXT)
@click.option("--home", type=click.Path(file_okay=False), envvar=HOME_ENV,
              help=f"Workspace folder holding wikis/ and rags/ (env {HOME_ENV}; default: current folder).")
@click.version_option(__version__, "--version", prog_name="wikirag")
@click.pass_context
def cli(ctx: click.Context, home: str | None) -> None:
    """Answer questions from many small markdown wikis, with citations you can check.

    Example: wikirag build --all && wikirag query public-help "how hot should the water be"
    """
    ctx.obj = Workspace.locate(home)


# build -----------------------------------------------------------------------------------------

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


def _build_one(wiki: Wiki, force: bool, as_json: bool) -> dict:
    bars: dict[str, object] = {}

    def progress(stage: str, done: int, total: int) -> None:
        bar = bars.get(stage)
        if bar is None and (total >= 200 or stage == "embedding") and total and not as_json:
            bar = bars[stage] = click.progressbar(length=total, label=f"{wiki.name}: {stage}", file=sys.stderr)
            bar.__enter__()
        if bar is not None:
            bar.update(done - bar.pos)

    try:
        report = index_mod.build(wiki, force=force, progress=progress)
    finally:
        for bar in bars.values():
            bar.__exit__(None, None, None)
    if not as_json:
        verb = "up to date" if report.state == "up to date" else f"built ({report.rechunked} file(s) chunked)"
        click.echo(f"{wiki.name}: {verb}: {report.files} files, {report.chunks} chunks, "
                   f"{len(report.skipped)} skipped, {report.seconds:.2f} s")
        for skip in report.skipped:
            click.echo(f"  skipped {skip.path}: {skip.reason}")
    return {"wiki": wiki.name, "state": report.state, "files": report.files, "chunks": report.chunks,
            "rechunked": report.rechunked, "seconds": round(report.seconds, 3), "build_id": report.build_id,
            "skipped": [{"path": s.path, "reason": s.reason} for s in report.skipped]}


@cli.command()
@click.argument("name", required=False)
@click.argument("source", required=False)
@click.option("--tag", "tags", multiple=True, help="Index only files with this tag, e.g. '#wiki/Topic' (repeatable).")
@click.option("--sensitivity", type=click.Choice(LEVEL_NAMES), help="The wiki's level (required to create one).")
@click.option("--title", help="The wiki's title (when creating or updating its manifest).")
@click.option("--all", "build_all", is_flag=True, help="Build every wiki of the workspace.")
@click.option("--force", is_flag=True, help="Re-chunk every file, even unchanged ones.")
@click.option("--json", "as_json", is_flag=True, help="Print the build reports as JSON.")
@click.pass_context
def build(ctx, name, source, tags, sensitivity, title, build_all, force, as_json):
    """Build (or update) the index of a wiki, or of every wiki with --all.

    With SOURCE (a folder or glob of markdown elsewhere, e.g. an Obsidian vault), first create or
    update wikis/NAME/.wiki.yaml to read from it. Builds are incremental and atomic: unchanged files
    are not re-chunked, and a failed build leaves the previous index serving.

    Example: wikirag build notes ~/vault --tag '#wiki/Topic' --sensitivity internal
    """
    ws = _workspace(ctx)
    if build_all and (name or source):
        raise click.UsageError("give either a wiki NAME or --all, not both")
    if not build_all and not name:
        raise click.UsageError("give a wiki NAME to build, or --all")
    if name and (source is not None or tags or sensitivity or title):
        _update_manifest(ws, name, source, tags, sensitivity, title)
    names = ws.wiki_names() if build_all else [name]
    if not names:
        raise NotFound(f"no wikis in {ws.wikis_dir}: create one with 'wikirag build NAME SOURCE --sensitivity LEVEL'")
    reports, failures = [], []
    for wiki_name in names:
        try:
            reports.append(_build_one(ws.wiki(wiki_name), force, as_json))
        except WikiragError as exc:
            if not build_all:
                raise
            failures.append(f"{wiki_name}: {exc}")
            click.echo(f"Error: {exc}", err=True)
    if as_json:
        click.echo(json.dumps({"built": reports, "failed": failures}, indent=2, ensure_ascii=False))
    if failures:
        raise click.ClickException(f"{len(failures)} of {len(names)} wiki(s) failed to build (see above)")


# query -----------------------------------------------------------------------------------------

def _snippet(text: str, width: int = 240) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1].rsplit(" ", 1)[0] + " …"


@cli.command()
@click.argument("rag")
@click.argument("question")
@click.option("-k", type=click.IntRange(1, 200), default=None, help="Passages to return (default: the composition's k, else 5).")
@click.option("--fusion", help="Fusion method to use instead of the composition's.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list of passages.")
@clearance_option
@click.pass_context
def query(ctx, rag, question, k, fusion, as_json, clearance):
    """Search a composition (a name in rags/ or a YAML path) and print the best passages.

    Each passage is cited as wiki/path:line with its heading path, and a passage found through a
    wiki's links (the graph layer) says which links led to it; --json adds exact character offsets
    (start, end) into the source file, each list's rank and score behind the fused score, and the
    links followed ("via").

    Example: wikirag query engineering "how do I page the on-call engineer" -k 3 --clearance internal
    """
    result = search(_workspace(ctx), rag, question, clearance=clearance, k=k, fusion=fusion)
    for warning in result.warnings:
        click.echo(f"warning: {warning}", err=True)
    if as_json:
        click.echo(json.dumps([p.to_dict() for p in result.passages], indent=2, ensure_ascii=False))
    else:
        for p in result.passages:
            heading = f"  ({p.heading})" if p.heading else ""
            click.echo(f"[{p.rank}] {p.wiki}/{p.path}:{p.line}{heading}")
            for hop in p.via:
                click.echo(f"    via {hop.link} in {hop.wiki}/{hop.path}:{hop.line}")
            click.echo(textwrap.indent(textwrap.fill(_snippet(p.text), 96), "    "))
    if result.hint:
        click.echo(f"no results: {result.hint}", err=True)


# ask ---------------------------------------------------------------------------------------------

@cli.command()
@click.argument("rag")
@click.argument("question")
@click.option("--model", help="'extractive', 'local', or a LiteLLM model string (default: the composition's "
              "model, else $WIKIRAG_MODEL, else extractive).")
@click.option("--api-base", help="URL of a self-hosted OpenAI-compatible server (env WIKIRAG_API_BASE).")
@click.option("-k", type=click.IntRange(1, 50), default=None, help="Passages to give the model (default 5).")
@click.option("--no-stream", is_flag=True, help="Print the answer only when it is complete.")
@click.option("--json", "as_json", is_flag=True, help="Print the whole result as JSON (implies --no-stream).")
@clearance_option
@click.pass_context
def ask(ctx, rag, question, model, api_base, k, no_stream, as_json, clearance):
    """Answer a question from a composition's passages, citing them as [n].

    The model answers only from the passages; each [n] is checked against the passages, and the
    sources are listed with their wiki, file, line and heading. If the model fails, the passages are
    still printed and the command exits 1 with the reason.

    Example: wikirag ask public-help "How hot should the water be for a V60?" --model local
    """
    from .answers import answer

    stream = answer(_workspace(ctx), rag, question, clearance=clearance, model=model, api_base=api_base, k=k)
    if as_json:
        result = stream.result
        click.echo(json.dumps(result.to_dict(), indent=2, ensure_ascii=False))
    else:
        if stream.partial.model == "local":
            click.echo("using the local model (SmolLM2-135M); starting it if needed …", err=True)
        if no_stream:
            result = stream.result
            click.echo(result.text)
        else:
            for text in stream:
                click.echo(text, nl=False)
            click.echo()
            result = stream.result
        _print_sources(result)
    for warning in result.warnings:
        click.echo(f"warning: {warning}", err=True)
    if result.invalid_citations:
        click.echo(f"warning: the answer cites {result.invalid_citations}, which name no passage", err=True)
    click.echo(f"retrieval {result.retrieval_seconds:.2f} s, generation {result.generation_seconds:.2f} s "
               f"({result.model})", err=True)
    if result.error:
        raise click.ClickException(f"{result.error} (the passages above were retrieved)")


@cli.command(name="serve-model")
@click.option("--port", type=int, default=8081, show_default=True, help="Port on 127.0.0.1.")
@click.option("--threads", type=int, default=1, show_default=True, help="CPU threads (1 is fastest on a busy machine).")
@click.option("--background", is_flag=True, help="Start it in the background and return (as 'ask --model local' does).")
@click.option("--stop", is_flag=True, help="Stop the background model server.")
@click.option("--status", is_flag=True, help="Say whether it runs, and where.")
def serve_model(port, threads, background, stop, status):
    """Run the bundled local model (SmolLM2-135M-Instruct) as an OpenAI-style server on 127.0.0.1.

    'wikirag ask --model local' starts it on demand in the background; use this to start it
    ahead of time, in the foreground (Ctrl-C stops it), or to stop a background one. Each start
    gets a random API key, stored with its port in the wikirag cache folder (readable by you only).

    Example: wikirag serve-model --background && wikirag ask public-help "How long does cold brew keep?" --model local
    """
    from . import localmodel

    if sum((background, stop, status)) > 1:
        raise click.UsageError("give at most one of --background, --stop and --status")
    if stop:
        click.echo("stopped" if localmodel.stop() else "no local model server was running")
    elif status:
        server = localmodel.running()
        click.echo(f"running: pid {server.pid}, {server.api_base}" if server else "not running")
    elif background:
        server = localmodel.ensure_running(port=port, threads=threads)
        click.echo(f"running: pid {server.pid}, {server.api_base}")
    else:
        click.echo(f"serving the local model on http://127.0.0.1:{port}/v1 (Ctrl-C stops it)", err=True)
        localmodel.serve(port, threads, record=True)


@cli.command()
@click.option("--port", type=int, default=8501, show_default=True, help="Port to serve on.")
@click.option("--address", default="127.0.0.1", show_default=True, help="Address to listen on (0.0.0.0 for all).")
@click.option("--demo", is_flag=True, help="Demo mode: the bundled demo accounts work (their passwords are public).")
@click.pass_context
def app(ctx, port, address, demo):
    """Start the web app (chat, compare, knowledge base) on this workspace.

    Runs 'streamlit run app.py' with the flags it needs: headless, no usage statistics, no file
    watcher. app.py is looked for in the workspace, then beside the installed package.

    Example: wikirag app --demo   (then open http://127.0.0.1:8501 and sign in as demo-public)
    """
    import subprocess

    ws = _workspace(ctx)
    candidates = [ws.home / "app.py", Path(__file__).resolve().parent.parent / "app.py"]
    script = next((c for c in candidates if c.is_file()), None)
    if script is None:
        raise WikiragError("app.py not found in the workspace or beside the package: run from the repository")
    command = [sys.executable, "-m", "streamlit", "run", str(script), "--server.port", str(port),
               "--server.address", address, "--server.headless", "true", "--server.fileWatcherType", "none",
               "--browser.gatherUsageStats", "false"]
    click.echo(f"wikirag app on http://{address}:{port} (workspace {ws.home}); Ctrl-C stops it", err=True)
    env = {**os.environ, "WIKIRAG_HOME": str(ws.home)}
    if demo:
        env["WIKIRAG_DEMO"] = "1"
        click.echo("demo mode: the demo accounts of the README can sign in", err=True)
    raise SystemExit(subprocess.call(command, cwd=script.parent, env=env))


@cli.group(cls=_Group)
def user():
    """Manage the app's local accounts (users.yaml in the workspace, or $WIKIRAG_USERS).

    Example: wikirag user add alice --clearance internal
    """


@user.command(name="add")
@click.argument("name")
@click.option("--clearance", type=click.Choice(LEVEL_NAMES), required=True, help="The user's clearance.")
@click.option("--can-build", is_flag=True, help="May rebuild wikis from the portal.")
@click.password_option(help="The password (prompted for, twice, when not given).")
@click.pass_context
def user_add(ctx, name, clearance, can_build, password):
    """Add or update an account; the password is stored only as a bcrypt hash.

    Example: wikirag user add alice --clearance internal --can-build
    """
    from .users import UserStore

    accounts = UserStore.for_home(_workspace(ctx).home)
    if accounts.is_demo:  # never add real accounts to the bundled demo file
        accounts = UserStore(_workspace(ctx).home / "users.yaml")
    accounts.add(name, password, clearance, can_build)
    click.echo(f"{name}: {clearance}{' (can build)' if can_build else ''} saved in {accounts.path}")


@user.command(name="remove")
@click.argument("name")
@click.pass_context
def user_remove(ctx, name):
    """Remove an account.

    Example: wikirag user remove alice
    """
    from .users import UserStore

    accounts = UserStore.for_home(_workspace(ctx).home)
    if accounts.is_demo or not accounts.remove(name):
        raise NotFound(f"no account '{name}' in {accounts.path}")
    click.echo(f"{name} removed")


@user.command(name="list")
@click.pass_context
def user_list(ctx):
    """List the accounts and their clearances (never the password hashes).

    Example: wikirag user list
    """
    from .users import UserStore

    accounts = UserStore.for_home(_workspace(ctx).home)
    for name, account in sorted(accounts.load().users.items()):
        click.echo(f"{name:<24} {account.clearance}{'  can build' if account.can_build else ''}")
    if accounts.is_demo:
        click.echo("(the bundled demo accounts: add real ones with 'wikirag user add')", err=True)


def _print_sources(result) -> None:
    if not result.passages:
        return
    cited = {c.n for c in result.citations}
    click.echo("\nSources:")
    for n, p in enumerate(result.passages, start=1):
        mark = "*" if n in cited else " "
        heading = f"  ({p.heading})" if p.heading else ""
        click.echo(f" {mark}[{n}] {p.wiki}/{p.path}:{p.line}{heading}")


# list / check ----------------------------------------------------------------------------------

@cli.command(name="list")
@click.option("--json", "as_json", is_flag=True, help="Print wikis and compositions as JSON.")
@clearance_option
@click.pass_context
def list_(ctx, as_json, clearance):
    """List the wikis and compositions at or below your clearance, with index status.

    Status is fresh, stale (sources changed since the build), missing (never built) or
    incompatible (built by another version: rebuild).

    Example: wikirag list --clearance internal --json
    """
    from .catalog import listing

    level = Level.parse(clearance)
    found = listing(_workspace(ctx), level)
    for problem in found.problems:
        click.echo(f"warning: {problem}", err=True)
    wikis = []
    for info in found.wikis:
        m, state = info.wiki.manifest, info.status
        wikis.append({"name": info.name, "title": m.title, "description": m.description, "tags": m.tags,
                      "sensitivity": str(info.wiki.level), "files": state.files, "chunks": state.chunks,
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


@cli.command()
@click.pass_context
def check(ctx):
    """Validate every wiki manifest and composition; list every problem, exit 1 if any.

    Indexes that are missing or stale, and links between pages that lead nowhere (dangling, checked
    against the serving builds), are noted on stderr but do not fail the check.

    Example: wikirag check && echo all good
    """
    from .graph import dangling_report

    ws = _workspace(ctx)
    problems = ws.check()
    graphs = {}
    for name in ws.wiki_names():
        try:
            wiki = ws.wiki(name)
            state = index_mod.status(wiki)
        except WikiragError:
            continue
        if state.state in ("fresh", "stale"):
            try:
                graphs[name] = store.load(wiki).graph
            except WikiragError as exc:
                click.echo(f"note: {exc}", err=True)
        if state.state != "fresh":
            click.echo(f"note: wiki '{name}' index is {state.state}: {state.detail}", err=True)
        if state.level_changed:
            click.echo(f"note: wiki '{name}' changed level since its build ({state.level_changed}): "
                       f"run 'wikirag build {name}'", err=True)
        if state.dense in ("missing", "other model"):
            reason = "has none" if state.dense == "missing" else "was built with another model"
            click.echo(f"note: wiki '{name}' declares a dense layer but its index {reason}: "
                       f"run 'wikirag build {name}'", err=True)
    for line in dangling_report(graphs, ws.wiki_names()):
        click.echo(f"note: {line}", err=True)
    if problems:
        for problem in problems:
            click.echo(problem, err=True)
        raise click.ClickException(f"{len(problems)} problem(s) found")
    click.echo(f"ok: {len(ws.wiki_names())} wikis, {len(ws.composition_names())} compositions")


# eval --------------------------------------------------------------------------------------------

@cli.command(name="eval")
@click.argument("sources", nargs=-1, required=True)
@click.option("--fusion", "fusions", multiple=True,
              help="Fusion method to evaluate (repeatable; default: every registered one).")
@click.option("-k", type=click.IntRange(1, 100), default=10, show_default=True, help="nDCG cut-off.")
@click.option("--exclude-self", "exclude_self", multiple=True,
              help="Dataset where a document whose id equals the query id is ignored (BEIR: arguana, quora).")
@click.option("--queries", "queries_file", type=click.Path(dir_okay=False, exists=True),
              help="With a composition: the queries (JSON lines with _id and text, or id<TAB>text).")
@click.option("--qrels", "qrels_file", type=click.Path(dir_okay=False, exists=True),
              help="With a composition: judgments, query-id<TAB>wiki/path<TAB>grade.")
@click.option("--cache", type=click.Path(file_okay=False), help="Where converted datasets and their "
              "indexes are kept (default: $WIKIRAG_CACHE/eval or ~/.cache/wikirag/eval).")
@click.option("--layers", help="Layers to search: bm25, dense, graph, or a mix such as bm25,graph. BEIR folders: "
              "default bm25 ('dense' embeds them with the offline model); a composition: default every layer "
              "its wikis have.")
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON.")
@clearance_option
@click.pass_context
def eval_(ctx, sources, fusions, k, exclude_self, queries_file, qrels_file, cache, layers, as_json, clearance):
    """Measure retrieval quality (nDCG@10, Recall@100) and speed on judged queries.

    With BEIR folders (corpus.jsonl, queries.jsonl, qrels/test.tsv), each folder becomes one wiki
    (converted and indexed once, cached) and every query runs against all of them; reported per
    dataset and macro-averaged, for each fusion method and the baselines 'monolith' (one index over
    all folders) and 'oracle' (the query's own folder only). With one composition and --queries
    and --qrels, your own judgments are scored for each fusion method.

    Example: wikirag eval ../shared/eval/beir/scifact ../shared/eval/classic/cisi --json
    """
    from . import evaluate

    layer_names = tuple(x.strip() for x in layers.split(",") if x.strip()) if layers is not None else None
    if layers is not None and not layer_names:
        raise click.UsageError(f"--layers takes bm25, dense, graph or a comma-separated mix, not {layers!r}")
    try:
        report = evaluate.run(sources, workspace=_workspace(ctx), methods=fusions, k=k, exclude_self=exclude_self,
                              queries=Path(queries_file) if queries_file else None,
                              qrels=Path(qrels_file) if qrels_file else None, cache=Path(cache) if cache else None,
                              layers=layer_names, clearance=clearance, progress=lambda msg: click.echo(msg, err=True))
    except QueryError as exc:
        raise click.UsageError(str(exc)) from None
    click.echo(json.dumps(report, indent=2) if as_json else evaluate.table(report))


def main() -> None:
    cli(prog_name="wikirag")
