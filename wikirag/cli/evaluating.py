"""``wikirag eval``: retrieval quality on judged queries (thin over :func:`wikirag.evaluate.run`)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from ..errors import QueryError
from .common import clearance_option, workspace


@click.command(name="eval")
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
    from .. import evaluate

    layer_names = tuple(x.strip() for x in layers.split(",") if x.strip()) if layers is not None else None
    if layers is not None and not layer_names:
        raise click.UsageError(f"--layers takes bm25, dense, graph or a comma-separated mix, not {layers!r}")
    try:
        report = evaluate.run(sources, workspace=workspace(ctx), methods=fusions, k=k, exclude_self=exclude_self,
                              queries=Path(queries_file) if queries_file else None,
                              qrels=Path(qrels_file) if qrels_file else None, cache=Path(cache) if cache else None,
                              layers=layer_names, clearance=clearance, progress=lambda msg: click.echo(msg, err=True))
    except QueryError as exc:
        raise click.UsageError(str(exc)) from None
    for skipped in report["skipped"]:
        click.echo(f"warning: query {skipped['id']} of {skipped['dataset']} skipped: {skipped['reason']}", err=True)
    click.echo(json.dumps(report, indent=2) if as_json else evaluate.table(report))
