"""The ``wikirag`` command line: build, query, ask, list, check, eval, gaps, app, user.

Results go to stdout, progress and errors to stderr. Exit codes: 0 success, 1 error (one clear line
per problem, no traceback), 2 usage error. The library raises :class:`~wikirag.errors.WikiragError`;
only the CLI turns it into an exit code (:class:`~wikirag.cli.common.Group`). Each command is a thin
call into the library; the commands live in this package's modules by what they are for.
"""

from __future__ import annotations

import click

from .. import __version__
from ..workspace import HOME_ENV, Workspace
from .admin import app, user
from .common import CONTEXT, Group
from .evaluating import eval_
from .gaps import gaps_
from .indexing import build, check, list_, watch
from .searching import ask, query, serve_model


@click.group(cls=Group, context_settings=CONTEXT)
@click.option("--home", type=click.Path(file_okay=False), envvar=HOME_ENV,
              help=f"Workspace folder holding wikis/ and rags/ (env {HOME_ENV}; default: current folder).")
@click.version_option(__version__, "--version", prog_name="wikirag")
@click.pass_context
def cli(ctx: click.Context, home: str | None) -> None:
    """Answer questions from many small markdown wikis, with citations you can check.

    Example: wikirag build --all && wikirag query public-help "how hot should the water be"
    """
    ctx.obj = Workspace.locate(home)


for _command in (build, watch, query, ask, serve_model, app, user, list_, check, eval_, gaps_):
    cli.add_command(_command)


def main() -> None:
    cli(prog_name="wikirag")
