"""``wikirag query``, ``ask`` and ``serve-model``: passages, grounded answers and the bundled local model."""

from __future__ import annotations

import json
import textwrap
from dataclasses import asdict

import click

from ..retrieval import search
from .common import clearance_option, snippet, workspace


@click.command()
@click.argument("rag")
@click.argument("question")
@click.option("-k", type=click.IntRange(1, 200), default=None, help="Passages to return (default: the composition's k, else 5).")
@click.option("--fusion", help="Fusion method to use instead of the composition's.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list of passages (with --explain: an object "
              "with the routing and the passages).")
@click.option("--explain", is_flag=True, help="Also show each wiki's routing weight for the question and what it "
              "added to its passages' scores, and each passage's lists (rank and score in each).")
@clearance_option
@click.pass_context
def query(ctx, rag, question, k, fusion, as_json, explain, clearance):
    """Search a composition (a name in rags/ or a YAML path) and print the best passages.

    Each passage is cited as wiki/path:line with its heading path, and a passage found through a
    wiki's links (the graph layer) says which links led to it; --json adds exact character offsets
    (start, end) into the source file, each list's rank and score behind the fused score, and the
    links followed ("via"). A passage is checked against its file as it is now: "state" is "current",
    "moved" (found elsewhere in the file: new offsets and line) or "changed" (its text is gone: offsets
    and line are null; rebuild the wiki).

    --explain says why a wiki's passages were preferred: each wiki's routing weight P(wiki | question)
    (from the wikis' own term statistics; the weights sum to 1) and the offset the fusion added to its
    passages' scores, then under each passage the lists it was found in.

    Example: wikirag query engineering "how do I page the on-call engineer" -k 3 --clearance internal
    """
    result = search(workspace(ctx), rag, question, clearance=clearance, k=k, fusion=fusion)
    for warning in result.warnings:
        click.echo(f"warning: {warning}", err=True)
    if as_json:
        passages = [p.to_dict() for p in result.passages]
        data = {"routing": [asdict(r) for r in result.routing], "passages": passages} if explain else passages
        click.echo(json.dumps(data, indent=2, ensure_ascii=False))
    else:
        if explain:
            _print_routing(result)
        for p in result.passages:
            heading = f"  ({p.heading})" if p.heading else ""
            if p.state == "changed":  # no line: it would point at other text
                click.echo(f"[{p.rank}] {p.wiki}/{p.path}{heading}  [changed since the build: not citable]")
            else:
                moved = "  [moved since the build]" if p.state == "moved" else ""
                click.echo(f"[{p.rank}] {p.wiki}/{p.path}:{p.line}{heading}{moved}")
            for hop in p.via:
                click.echo(f"    via {hop.link} in {hop.wiki}/{hop.path}:{hop.line}")
            if explain:
                lists = ", ".join(f"{c.layer} #{c.rank} ({c.score:.3f})" for c in p.contributions)
                offset = next((c.offset for c in p.contributions if c.offset), 0.0)
                click.echo(f"    score {p.score:.3f}: {lists}" + (f", routing {offset:+.3f}" if offset else ""))
            click.echo(textwrap.indent(textwrap.fill(snippet(p.text), 96), "    "))
    if result.hint:
        click.echo(f"no results: {result.hint}", err=True)


def _print_routing(result) -> None:
    """The routing lines of ``query --explain``: one per wiki, the most likely first."""
    if not result.routing:
        reason = ("one wiki" if len(result.wikis) < 2 else "this fusion does not route, or no BM25 term matched")
        click.echo(f"routing: none ({reason})")
        return
    click.echo("routing (P(wiki | question); offset added to the wiki's passage scores):")
    for r in sorted(result.routing, key=lambda r: -r.weight):
        click.echo(f"  {r.wiki:<28} {r.weight:6.1%}  {r.offset:+.3f}")


@click.command()
@click.argument("rag")
@click.argument("questions", nargs=-1, required=True, metavar="QUESTION [QUESTION ...]")
@click.option("--model", help="'extractive', 'local', or a LiteLLM model string (default: the composition's "
              "model, else $WIKIRAG_MODEL, else extractive).")
@click.option("--api-base", help="URL of a self-hosted OpenAI-compatible server (env WIKIRAG_API_BASE).")
@click.option("-k", type=click.IntRange(1, 50), default=None, help="Passages to give the model (default 5).")
@click.option("--no-stream", is_flag=True, help="Print the answer only when it is complete.")
@click.option("--json", "as_json", is_flag=True, help="Print each turn's whole result as one JSON object per line "
              "(implies --no-stream).")
@clearance_option
@click.pass_context
def ask(ctx, rag, questions, model, api_base, k, no_stream, as_json, clearance):
    """Answer questions from a composition's passages, citing them as [n].

    Several questions are asked in order as one conversation: each later one is understood with the
    turns before it (a follow-up such as "and how long does it keep?" is rewritten as a standalone
    question, shown as "searched:", before it is retrieved). The model answers only from the passages;
    each [n] is checked against the passages, and the sources are listed with their wiki, file, line
    and heading. If the model fails, the passages are still printed and the command exits 1 with the
    reason (after the turns asked so far).

    Example: wikirag ask public-help "How much coffee goes into a French press?" "And how long does it steep?"
    """
    from ..answers import answer
    from ..followup import Exchange

    ws, history, failed = workspace(ctx), [], None
    for i, question in enumerate(questions):
        stream = answer(ws, rag, question, clearance=clearance, model=model, api_base=api_base, k=k,
                        history=history)
        if as_json:
            result = stream.result
            click.echo(json.dumps(result.to_dict(), ensure_ascii=False))
        else:
            if len(questions) > 1:
                click.echo(("\n" if i else "") + f"> {question}")
            if stream.partial.searched != question:
                click.echo(f"searched: {stream.partial.searched}")
            if stream.partial.model == "local" and i == 0:
                from .. import localmodel

                click.echo(f"using the local model ({localmodel.model_name()}); starting it if needed …", err=True)
            if no_stream:
                result = stream.result
                click.echo(result.text)
            else:
                for text in stream:
                    click.echo(text, nl=False)
                click.echo()
                result = stream.result
            _print_sources(result)
        _report(result)
        history.append(Exchange.of(result))
        if result.error:
            failed = result.error
            break
    if failed:
        raise click.ClickException(f"{failed} (the passages above were retrieved)")


def _report(result) -> None:
    """A turn's warnings and timings, on stderr."""
    for warning in result.warnings:
        click.echo(f"warning: {warning}", err=True)
    if result.invalid_citations:
        click.echo(f"warning: the answer cites {result.invalid_citations}, which name no passage", err=True)
    if result.unsupported_citations:
        click.echo(f"warning: the answer cites {result.unsupported_citations} for statements those passages do "
                   "not hold (their numbers or most of their terms are not in them)", err=True)
    rewrite = (f"rewrite {result.rewrite_seconds * 1000:.0f} ms ({result.rewrite}), "
               if result.rewrite in ("offline", "model") else "")
    click.echo(f"{rewrite}retrieval {result.retrieval_seconds:.2f} s, generation {result.generation_seconds:.2f} s "
               f"({result.model})", err=True)


@click.command(name="serve-model")
@click.option("--port", type=int, default=8081, show_default=True, help="Port on 127.0.0.1.")
@click.option("--threads", type=int, help="CPU threads (default: 2, or 1 on a one-core machine; $WIKIRAG_LOCAL_THREADS).")
@click.option("--background", is_flag=True, help="Start it in the background and return (as 'ask --model local' does).")
@click.option("--stop", is_flag=True, help="Stop the background model server.")
@click.option("--status", is_flag=True, help="Say whether it runs, and where.")
@click.option("--model", help="smollm2 (default), gemma3-270m or a .gguf path; default $WIKIRAG_LOCAL_MODEL.")
def serve_model(port, threads, background, stop, status, model):
    """Run the bundled local model (SmolLM2-135M-Instruct) as an OpenAI-style server on 127.0.0.1.

    'wikirag ask --model local' starts it on demand in the background; use this to start it
    ahead of time, in the foreground (Ctrl-C stops it), or to stop a background one. Each start
    gets a random API key, stored with its port in the wikirag cache folder (readable by you only).

    Example: wikirag serve-model --background && wikirag ask public-help "How long does cold brew keep?" --model local
    """
    from .. import localmodel

    if sum((background, stop, status)) > 1:
        raise click.UsageError("give at most one of --background, --stop and --status")
    if stop:
        click.echo("stopped" if localmodel.stop() else "no local model server was running")
    elif status:
        server = localmodel.running()
        click.echo(f"running: {server.model}, pid {server.pid}, {server.api_base}" if server else "not running")
    elif background:
        server = localmodel.ensure_running(port=port, threads=threads, model=model)
        click.echo(f"running: {server.model}, pid {server.pid}, {server.api_base}")
    else:
        click.echo(f"serving the local model on http://127.0.0.1:{port}/v1 (Ctrl-C stops it)", err=True)
        localmodel.serve(port, threads, record=True, model=model)


def _print_sources(result) -> None:
    if not result.passages:
        return
    cited = {c.n for c in result.citations}
    click.echo("\nSources:")
    for n, p in enumerate(result.passages, start=1):
        mark = "*" if n in cited else " "
        heading = f"  ({p.heading})" if p.heading else ""
        where = f"{p.wiki}/{p.path}" if p.wiki else p.path  # a composition's own file: rags/x.yaml
        click.echo(f" {mark}[{n}] {where}:{p.line}{heading}")
