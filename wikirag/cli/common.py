"""What every command of the ``wikirag`` CLI shares: error handling, the workspace, common options."""

from __future__ import annotations

import os

import click

from ..access import CLEARANCE_ENV, LEVEL_NAMES
from ..errors import WikiragError
from ..workspace import Workspace

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


class Group(click.Group):
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


def workspace(ctx: click.Context) -> Workspace:
    """The workspace the ``--home`` option chose (set on the root context)."""
    return ctx.find_root().obj


clearance_option = click.option(
    "--clearance", type=click.Choice(LEVEL_NAMES), envvar=CLEARANCE_ENV, default="public", show_default=True,
    help=f"Your clearance; you only see what is at or below it (env {CLEARANCE_ENV}).",
)



def snippet(text: str, width: int = 240) -> str:
    """``text`` on one line, cut at a word to at most ``width`` characters."""
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1].rsplit(" ", 1)[0] + " …"
