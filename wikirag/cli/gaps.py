"""``wikirag gaps``: the questions the wikis could not answer (refused, unsupported, voted down)."""

from __future__ import annotations

import json
from itertools import groupby

import click

from .common import clearance_option, snippet, workspace


@click.command(name="gaps")
@click.argument("wiki", required=False)
@click.option("--kind", "kinds", multiple=True, type=click.Choice(["refused", "unsupported", "down"]),
              help="Only this kind (repeatable; default: all three).")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list of the gaps.")
@clearance_option
@click.pass_context
def gaps_(ctx, wiki, kinds, as_json, clearance):
    """List the questions a wiki (or every wiki you may see) could not answer, newest first.

    A question counts when its answer was refused, cited a passage for a statement it does not hold
    (unsupported), or was voted down in the app; it is listed under every wiki its composition
    searched, and only when your clearance covers both that wiki now and the composition it was asked
    in. Text output groups them by wiki, with the count per ISO week (times in UTC); --json prints a list of
    {wiki, at, kind, composition, question, searched, comment, cited, unsupported}. Kept in
    .sessions/feedback.jsonl of the workspace (WIKIRAG_FEEDBACK=off keeps none).

    Example: wikirag gaps alpha --clearance internal --kind refused
    """
    from ..feedback import gaps, weekly

    found = gaps(workspace(ctx), clearance, wiki, kinds=kinds or None)
    if as_json:
        click.echo(json.dumps([g.to_dict() for g in found], indent=2, ensure_ascii=False))
        return
    if not found:
        click.echo("no questions that could not be answered", err=True)
        return
    for name, group in groupby(sorted(found, key=lambda g: (g.wiki, -g.at)), key=lambda g: g.wiki):
        items = list(group)
        weeks = ", ".join(f"{week}: {n}" for week, n in weekly(items))
        click.echo(f"{name}: {len(items)} question(s) ({weeks})")
        for g in items:
            searched = f"  (searched: {snippet(g.searched, 120)})" if g.searched and g.searched != g.question else ""
            comment = f"  — {snippet(g.comment, 160)}" if g.comment else ""
            click.echo(f"  {g.when:%Y-%m-%d %H:%M}  {g.kind:<11}  {g.composition}  {snippet(g.question, 160)}"
                       f"{searched}{comment}")
