"""Accounts: bcrypt only, no hint on failure, single sign-on clearance from the access file."""

from __future__ import annotations

import threading
from pathlib import Path

import bcrypt
import pytest
from click.testing import CliRunner

from wikirag.access import Level
from wikirag.cli import cli
from wikirag.errors import AccountError, AuthError, ConfigError
from wikirag.users import DEMO_USERS, MAX_FAILURES, LoginThrottle, UserStore, sso_user


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


def _at_once(store: UserStore, tries: list[tuple[str, str, str | None]]) -> list[str]:
    """Run every (name, password, client) try in its own thread, all released at the same moment; the
    message each got ('wrong user name or password' means its password was checked)."""
    barrier = threading.Barrier(len(tries))
    results: list[str] = [""] * len(tries)

    def attempt(i: int, name: str, password: str, client: str | None) -> None:
        barrier.wait()
        try:
            store.authenticate(name, password, client=client)
            results[i] = "signed in"
        except AuthError as exc:
            results[i] = str(exc).partition(":")[0]

    threads = [threading.Thread(target=attempt, args=(i, *t)) for i, t in enumerate(tries)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


@pytest.mark.parametrize("clients", ["one browser", "40 browsers"])
def test_concurrent_wrong_tries_get_at_most_the_limit_of_password_checks(clients: str) -> None:
    """The red team's race: 40 tries at the same moment used to get 28 password checks (limit 5). A try is
    now counted before its password is checked, so exactly the limit get checked and the rest are refused."""
    store = UserStore(DEMO_USERS)  # the demo accounts: bcrypt cost 12, as real ones
    tries = [("demo-internal", f"guess-{i}", "browser" if clients == "one browser" else f"browser-{i}")
             for i in range(40)]
    results = _at_once(store, tries)
    assert results.count("wrong user name or password") == MAX_FAILURES
    assert results.count("too many failed sign-ins") == 40 - MAX_FAILURES
    with pytest.raises(AuthError, match="too many failed sign-ins"):  # the right password too, until it expires
        store.authenticate("demo-internal", "demo-internal-pw", client="another-browser")


def test_a_browser_trying_many_names_is_limited(tmp_path: Path) -> None:
    store = UserStore(tmp_path / "users.yaml")
    store.add("alice", "correct horse battery", "internal")
    results = _at_once(store, [(f"user-{i}", "guess", "browser-1") for i in range(12)])  # one name each
    assert results.count("wrong user name or password") == MAX_FAILURES
    with pytest.raises(AuthError, match="too many failed sign-ins"):
        store.authenticate("alice", "correct horse battery", client="browser-1")
    assert store.authenticate("alice", "correct horse battery", client="browser-2").name == "alice"


def test_a_network_address_has_a_looser_limit_of_its_own(tmp_path: Path) -> None:
    """Many people may share an address (a proxy, an office): its limit counts every session behind it."""
    store = UserStore(tmp_path / "users.yaml", LoginThrottle(address_limit=7))
    store.add("alice", "correct horse battery", "internal")
    for i in range(7):  # a fresh session and name each time: only the address adds up
        with pytest.raises(AuthError, match="wrong user name or password"):
            store.authenticate(f"user-{i}", "guess", client=f"session-{i}", address="203.0.113.9")
    with pytest.raises(AuthError, match="too many failed sign-ins"):
        store.authenticate("alice", "correct horse battery", client="session-new", address="203.0.113.9")
    assert store.authenticate("alice", "correct horse battery", client="session-new", address="198.51.100.4")


def test_a_success_gives_its_try_back_but_does_not_reset_the_browser(tmp_path: Path) -> None:
    store = UserStore(tmp_path / "users.yaml")
    store.add("alice", "correct horse battery", "internal")
    for i in range(MAX_FAILURES - 1):
        with pytest.raises(AuthError, match="wrong user name or password"):
            store.authenticate(f"victim-{i}", "guess", client="browser-1")
    for _ in range(3):  # signing in to one's own account neither counts nor clears the browser's failures
        assert store.authenticate("alice", "correct horse battery", client="browser-1").name == "alice"
    with pytest.raises(AuthError, match="wrong user name or password"):
        store.authenticate("victim-x", "guess", client="browser-1")
    with pytest.raises(AuthError, match="too many failed sign-ins"):
        store.authenticate("alice", "correct horse battery", client="browser-1")


def test_a_right_password_works_once_the_lockout_window_has_passed(tmp_path: Path) -> None:
    now = [1000.0]
    store = UserStore(tmp_path / "users.yaml", LoginThrottle(window=600, clock=lambda: now[0]))
    store.add("alice", "correct horse battery", "internal")
    results = _at_once(store, [("alice", "guess", f"browser-{i}") for i in range(10)])
    assert results.count("wrong user name or password") == MAX_FAILURES
    now[0] += 599
    with pytest.raises(AuthError, match="too many failed sign-ins: try again in 1 s"):
        store.authenticate("alice", "correct horse battery")
    now[0] += 1
    assert store.authenticate("alice", "correct horse battery", client="browser-0").name == "alice"
    for _ in range(MAX_FAILURES):  # and the success cleared the name's failures
        with pytest.raises(AuthError, match="wrong user name or password"):
            store.authenticate("alice", "guess")


@pytest.mark.parametrize("password", ["x" * 73, "correct horse battery" * 5, "é" * 37, "\ud800"])
def test_a_password_bcrypt_cannot_take_fails_like_a_wrong_one(tmp_path: Path, monkeypatch, password: str) -> None:
    """Over 72 bytes (bcrypt 5 raises ValueError) or not encodable: the normal failure, counted, no bcrypt call."""
    store = UserStore(tmp_path / "users.yaml")
    store.add("alice", "correct horse battery", "internal")

    def no_bcrypt(*_):
        raise AssertionError("bcrypt was called for a password it cannot take")

    monkeypatch.setattr(bcrypt, "checkpw", no_bcrypt)
    for name in ["alice"] * MAX_FAILURES:
        with pytest.raises(AuthError, match="^wrong user name or password$"):
            store.authenticate(name, password)
    with pytest.raises(AuthError, match="too many failed sign-ins"):  # each one counted as a failure
        store.authenticate("alice", password)
    with pytest.raises(AuthError, match="^wrong user name or password$"):  # no hint that the account is missing
        store.authenticate("nobody", password)


def test_a_broken_users_file_does_not_count_as_a_failed_try(tmp_path: Path) -> None:
    path = tmp_path / "users.yaml"
    path.write_text("users:\n  bob: {password: hunter2, clearance: public}\n")
    store = UserStore(path)
    for _ in range(MAX_FAILURES + 2):
        with pytest.raises(ConfigError):
            store.authenticate("bob", "hunter2", client="browser-1")


@pytest.mark.parametrize("password", ["x" * 73, "é" * 37])
def test_an_account_cannot_get_a_password_over_72_bytes(tmp_path: Path, password: str) -> None:
    store = UserStore(tmp_path / "users.yaml")
    with pytest.raises(AccountError, match="at most 72 bytes in UTF-8"):
        store.add("alice", password, "internal")
    assert not store.path.exists()
    store.add("alice", "é" * 36, "internal")  # 72 bytes: fine
    assert store.authenticate("alice", "é" * 36).name == "alice"
    result = CliRunner().invoke(cli, ["--home", str(tmp_path), "user", "add", "bob", "--clearance", "public",
                                      "--password", password])
    assert result.exit_code == 1
    assert "Error: a password can have at most 72 bytes in UTF-8" in result.output
    assert "Traceback" not in result.output and "bob" not in store.path.read_text()


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


def test_sessions_are_held_server_side_and_end_everywhere(tmp_path: Path, monkeypatch) -> None:
    import time as time_mod

    from wikirag.sessions import SessionStore

    users = UserStore(tmp_path / "users.yaml")
    users.add("ana", "a-long-password", "internal")
    users.add("bo", "another-password", "public")
    store = SessionStore(tmp_path)
    ana = users.authenticate("ana", "a-long-password")
    first, _ = store.start(ana)
    second, _ = store.start(ana)  # another browser
    bo, _ = store.start(users.authenticate("bo", "another-password"))
    assert store.user(first, users)[0] == ana and store.user(second, users)[0] == ana
    # the file holds no token, and only its owner may read it
    held = store.path.read_text()
    assert first not in held and second not in held and (store.path.stat().st_mode & 0o077) == 0
    assert store.user("forged-" + first, users) is None and store.user("", users) is None
    assert store.user(None, users) is None and store.user("x" * 10_000, users) is None
    # the account as it is now: a changed clearance applies, a removed account signs nobody in
    users.add("ana", "a-long-password", "confidential")
    assert store.user(first, users)[0].clearance is Level.CONFIDENTIAL
    # sign-out ends every session of that user, not another user's
    assert store.end_all("ana") == 2
    assert store.user(first, users) is None and store.user(second, users) is None
    assert store.user(bo, users)[0].name == "bo"
    users.remove("bo")
    assert store.user(bo, users) is None
    # 8 hours later a session has ended
    users.add("bo", "another-password", "public")
    later = time_mod.time() + 8 * 3600 + 1
    monkeypatch.setattr(time_mod, "time", lambda: later)
    assert store.user(bo, users) is None


def test_a_read_only_workspace_still_signs_in(tmp_path: Path) -> None:
    from wikirag.sessions import SessionStore
    from wikirag.users import User

    store = SessionStore(tmp_path / "ro")
    (tmp_path / "ro").mkdir()
    (tmp_path / "ro" / ".sessions").write_text("a file where the folder would be")  # cannot be written
    token, _ = store.start(User("ana", Level.INTERNAL))
    assert token  # signed in for this browser session; a reload will ask again
    store.remember("ana", "chat", "team")  # not kept, and no error
    assert store.recall("ana", "chat") is None


SIGN_INS = """
import sys, time
from pathlib import Path
from wikirag.sessions import SessionStore
from wikirag.users import User
from wikirag.access import Level
home, tag, start = Path(sys.argv[1]), sys.argv[2], float(sys.argv[3])
store = SessionStore(home)
while time.time() < start:
    time.sleep(0.001)
for i in range(40):
    token, _ = store.start(User(f"{tag}{i}", Level.PUBLIC))
    print(token, flush=True)
    store.remember(f"{tag}{i}", "chat", f"comp-{tag}{i}")
"""


def test_two_app_processes_signing_in_at_once_lose_no_session(tmp_path: Path) -> None:
    """Two processes (two app processes over one workspace) start 40 sessions each at the same moment:
    every one of the 80 is valid afterwards (no read-modify-write of sessions.json overwrites another's),
    and every remembered choice is kept."""
    import subprocess
    import sys
    import time

    from wikirag.sessions import SessionStore

    hashed = bcrypt.hashpw(b"a-long-password", bcrypt.gensalt(rounds=4)).decode()  # 80 accounts, one hash
    (tmp_path / "users.yaml").write_text("users:\n" + "".join(
        f"  {tag}{i}: {{password: '{hashed}', clearance: public}}\n" for tag in "pq" for i in range(40)))
    users = UserStore(tmp_path / "users.yaml")
    start = time.time() + 2
    procs = [subprocess.Popen([sys.executable, "-c", SIGN_INS, str(tmp_path), tag, str(start)],
                              stdout=subprocess.PIPE, text=True) for tag in "pq"]
    tokens = [line.strip() for p in procs for line in p.communicate(timeout=120)[0].splitlines()]
    assert [p.returncode for p in procs] == [0, 0] and len(tokens) == 80
    store = SessionStore(tmp_path)
    signed_in = [store.user(token, users) for token in tokens]
    assert sum(s is not None for s in signed_in) == 80
    assert {s[0].name for s in signed_in if s} == {f"{tag}{i}" for tag in "pq" for i in range(40)}
    assert all(store.recall(f"{tag}{i}", "chat") == f"comp-{tag}{i}" for tag in "pq" for i in range(40))


def test_failed_sign_ins_are_counted_across_app_processes(tmp_path: Path) -> None:
    """The workspace's throttle file is shared: 3 failed tries in this process and 2 in another process
    use up the 5 a user name has, so the 6th is refused in either; a right password clears the count."""
    import subprocess
    import sys

    hashed = bcrypt.hashpw(b"a-long-password", bcrypt.gensalt(rounds=4)).decode()
    (tmp_path / "users.yaml").write_text(f"users:\n  ana: {{password: '{hashed}', clearance: internal}}\n")
    one = UserStore.for_home(tmp_path)
    for _ in range(3):
        with pytest.raises(AuthError, match="wrong user name or password"):
            one.authenticate("ana", "wrong", client="browser-1")
    other = ("import sys; from pathlib import Path; from wikirag.users import UserStore; from wikirag.errors import "
             "AuthError\nstore = UserStore.for_home(Path(sys.argv[1]))\nfor _ in range(2):\n    try:\n"
             "        store.authenticate('ana', 'wrong', client='browser-2')\n    except AuthError as e:\n"
             "        print(e)\n")
    done = subprocess.run([sys.executable, "-c", other, str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.count("wrong user name or password") == 2, done.stderr
    with pytest.raises(AuthError, match="too many failed sign-ins"):
        UserStore.for_home(tmp_path).authenticate("ana", "a-long-password", client="browser-3")
    assert ((tmp_path / ".sessions" / "throttle.json").stat().st_mode & 0o077) == 0
