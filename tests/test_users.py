"""Accounts: bcrypt only, no hint on failure, single sign-on clearance from the access file."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from wikirag.access import Level
from wikirag.cli import cli
from wikirag.errors import AuthError, ConfigError
from wikirag.users import UserStore, sso_user


def test_demo_accounts_apply_only_in_demo_mode_without_a_users_file(tmp_path: Path, monkeypatch) -> None:
    outside = UserStore.for_home(tmp_path)
    assert not outside.is_demo and outside.load().users == {}
    with pytest.raises(AuthError):
        outside.authenticate("demo-internal", "demo-internal-pw")
    monkeypatch.setenv("WIKIRAG_DEMO", "1")
    store = UserStore.for_home(tmp_path)
    assert store.is_demo
    assert store.authenticate("demo-internal", "demo-internal-pw").clearance == Level.INTERNAL
    (tmp_path / "users.yaml").write_text("users: {}\n")
    assert not UserStore.for_home(tmp_path).is_demo


def test_a_copied_demo_account_is_refused_outside_demo_mode(tmp_path: Path) -> None:
    demo = (Path(__file__).parent.parent / "wikirag" / "demo_users.yaml").read_text()
    (tmp_path / "users.yaml").write_text(demo)
    with pytest.raises(ConfigError, match="use a demo password, which is published"):
        UserStore.for_home(tmp_path).authenticate("demo-public", "demo-public-pw")


def test_failed_sign_ins_are_rate_limited(tmp_path: Path) -> None:
    store = UserStore(tmp_path / "users.yaml")
    store.add("alice", "correct horse battery", "internal")
    for _ in range(5):
        with pytest.raises(AuthError, match="wrong user name or password"):
            store.authenticate("alice", "guess", client="browser-1")
    with pytest.raises(AuthError, match="too many failed sign-ins: try again in"):
        store.authenticate("alice", "correct horse battery", client="browser-2")  # the name is locked
    with pytest.raises(AuthError, match="too many failed sign-ins"):
        store.authenticate("bob", "anything", client="browser-1")  # and so is the client


def test_the_sso_cookie_secret_must_be_real() -> None:
    from wikirag.users import check_cookie_secret

    for bad in (None, "", "short", "change-me-" + "x" * 40, "example" + "y" * 40):
        with pytest.raises(ConfigError, match="cookie_secret .* must be a random secret"):
            check_cookie_secret(bad)
    check_cookie_secret("k3J8s0dPq9ZrT2vW7xY1aB4cD6eF8gH0iJ2kL5mN")


def test_add_stores_only_a_bcrypt_hash(tmp_path: Path) -> None:
    store = UserStore(tmp_path / "users.yaml")
    store.add("alice", "correct horse battery", "confidential", can_build=True)
    text = store.path.read_text()
    assert "correct horse" not in text and "$2b$" in text
    user = store.authenticate("Alice ", "correct horse battery")
    assert (user.name, user.clearance, user.can_build) == ("alice", Level.CONFIDENTIAL, True)


@pytest.mark.parametrize(("name", "password"), [("alice", "wrong"), ("mallory", "correct horse battery"), ("", "")])
def test_failures_look_the_same(tmp_path: Path, name: str, password: str) -> None:
    store = UserStore(tmp_path / "users.yaml")
    store.add("alice", "correct horse battery", "internal")
    with pytest.raises(AuthError, match="^wrong user name or password$"):
        store.authenticate(name, password)


def test_a_plain_password_in_the_users_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "users.yaml"
    path.write_text("users:\n  bob: {password: hunter2, clearance: public}\n")
    with pytest.raises(ConfigError, match="users.yaml:2: key 'users.bob.password': must be a bcrypt hash"):
        UserStore(path).authenticate("bob", "hunter2")


def test_single_sign_on_clearance_from_the_access_file(tmp_path: Path) -> None:
    assert sso_user("x@anywhere.org", tmp_path).clearance == Level.PUBLIC  # no access file: public
    (tmp_path / "access.yaml").write_text(
        "emails: {carol@example.com: confidential}\ndomains: {example.com: internal}\nunknown: refuse\n")
    assert sso_user("Carol@Example.com", tmp_path).clearance == Level.CONFIDENTIAL
    assert sso_user("dave@example.com", tmp_path).clearance == Level.INTERNAL
    with pytest.raises(AuthError, match="may not use this wikirag"):
        sso_user("eve@elsewhere.net", tmp_path)


def test_user_commands(tmp_path: Path) -> None:
    runner = CliRunner()
    added = runner.invoke(cli, ["--home", str(tmp_path), "user", "add", "alice", "--clearance", "internal"],
                          input="correct horse battery\ncorrect horse battery\n")
    assert added.exit_code == 0, added.output
    listed = runner.invoke(cli, ["--home", str(tmp_path), "user", "list"])
    assert listed.stdout.split() == ["alice", "internal"]
    assert runner.invoke(cli, ["--home", str(tmp_path), "user", "remove", "alice"]).exit_code == 0
    assert runner.invoke(cli, ["--home", str(tmp_path), "user", "remove", "alice"]).exit_code == 1
