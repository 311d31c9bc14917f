"""``wikirag app`` and ``wikirag user``: the web app and its accounts."""

from __future__ import annotations

import os
import sys

import click

from ..access import LEVEL_NAMES
from ..errors import NotFound
from .common import Group, workspace


@click.command()
@click.option("--port", type=int, default=8501, show_default=True, help="Port to serve on.")
@click.option("--address", default="127.0.0.1", show_default=True, help="Address to listen on (0.0.0.0 for all).")
@click.option("--demo", is_flag=True, help="Demo mode: the bundled demo accounts work (their passwords are public).")
@click.option("--watch/--no-watch", default=lambda: os.environ.get("WIKIRAG_WATCH", "") in ("1", "true", "yes"),
              help="Rebuild each wiki as its sources change (as 'wikirag watch', in the app's process); "
                   "default: $WIKIRAG_WATCH (set in the Docker image).")
@click.pass_context
def app(ctx, port, address, demo, watch):
    """Start the web app (chat, compare, knowledge base) on this workspace.

    Runs 'streamlit run' on the app installed with the package (wikirag/webapp/router.py), in this
    process's place, from the workspace folder (so single sign-on reads the workspace's
    .streamlit/secrets.toml), with the settings of the repository's .streamlit/config.toml on the
    command line: headless, no usage statistics, no file watcher, minimal toolbar, no error details
    (tracebacks) and no page list in the browser.

    With --watch, one watcher (wikirag.watch) runs in the app's process for all sessions: an edited page
    is rebuilt and answerable within seconds, and the knowledge base shows each wiki's "updated N s ago"
    and any build error.

    Example: wikirag app --demo --watch   (then open http://127.0.0.1:8501 and sign in as demo-public)
    """
    import subprocess

    from ..webapp import ROUTER

    ws = workspace(ctx)
    command = [sys.executable, "-m", "streamlit", "run", str(ROUTER), "--server.port", str(port),
               "--server.address", address, "--server.headless", "true", "--server.fileWatcherType", "none",
               "--browser.gatherUsageStats", "false", "--client.toolbarMode", "minimal",
               "--client.showErrorDetails", "none", "--client.showSidebarNavigation", "false",
               "--runner.postScriptGC", "false", "--runner.magicEnabled", "false"]
    click.echo(f"wikirag app on http://{address}:{port} (workspace {ws.home}); Ctrl-C stops it", err=True)
    env = {**os.environ, "WIKIRAG_HOME": str(ws.home)}
    if demo:
        env["WIKIRAG_DEMO"] = "1"
        click.echo("demo mode: the demo accounts of the README can sign in", err=True)
    env["WIKIRAG_WATCH"] = "1" if watch else "0"
    if watch:
        click.echo("watching the wikis' sources: each change is rebuilt as it comes", err=True)
    if os.name == "posix":  # streamlit replaces this process: Ctrl-C and `docker stop` (SIGTERM) reach it directly
        sys.stdout.flush()
        sys.stderr.flush()
        os.chdir(ws.home)
        os.execve(sys.executable, command, env)
    raise SystemExit(subprocess.call(command, cwd=ws.home, env=env))


@click.group(cls=Group)
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
    from ..users import UserStore

    accounts = UserStore.for_home(workspace(ctx).home)
    if accounts.is_demo:  # never add real accounts to the bundled demo file
        accounts = UserStore(workspace(ctx).home / "users.yaml")
    accounts.add(name, password, clearance, can_build)
    click.echo(f"{name}: {clearance}{' (can build)' if can_build else ''} saved in {accounts.path}")


@user.command(name="remove")
@click.argument("name")
@click.pass_context
def user_remove(ctx, name):
    """Remove an account.

    Example: wikirag user remove alice
    """
    from ..users import UserStore

    accounts = UserStore.for_home(workspace(ctx).home)
    if accounts.is_demo or not accounts.remove(name):
        raise NotFound(f"no account '{name}' in {accounts.path}")
    click.echo(f"{name} removed")


@user.command(name="list")
@click.pass_context
def user_list(ctx):
    """List the accounts and their clearances (never the password hashes).

    Example: wikirag user list
    """
    from ..users import UserStore

    accounts = UserStore.for_home(workspace(ctx).home)
    for name, account in sorted(accounts.load().users.items()):
        click.echo(f"{name:<24} {account.clearance}{'  can build' if account.can_build else ''}")
    if accounts.is_demo:
        click.echo("(the bundled demo accounts: add real ones with 'wikirag user add')", err=True)
