"""Benchmark: fifty people at once in the web app (issue 35, item 2).

``--users`` (50) simulated people, each with an account of their own and a signed-in session, each a real
websocket session of Streamlit's own protocol — the one the browser speaks: ``BackMsg``/``ForwardMsg``
protobufs over ``/_stcore/stream``, with the session cookie in the handshake as a browser sends it after
sign-in — against real ``wikirag app`` processes started as users start them. With ``--processes N``
there are N app processes on N ports over the same workspace and each person stays on one of them
(person ``i`` on process ``i mod N``), as behind a sticky reverse proxy (README "Running for a team").

Each person opens the chat (the composition ``load``, the extractive answer), then asks ``--questions``
(10) questions drawn for them (a fixed seed) from ``bench/questions.jsonl``, typed into the chat input, one
conversation each, with a think time before each (uniform ``--think`` seconds, default 10–30: reading a
three-sentence answer and typing a ten-word question take about that long; shorter times are a stress
test, not fifty people). All start
within the first ``--ramp`` (10) seconds. Measured per answer, from the moment the chat input's value is
sent: **first token**, the first answer text on the screen (the first markdown element after the
question's own echo), and **whole answer**, the end of the page's run (the answer with its citations and
timings shown); **errors**: an exception or error element on the page, a closed socket, or no end within
60 s. The server's resident memory (``VmRSS`` of every process of the app's process group) with one
session open and at the peak with every session open; memory per extra session = (peak − one) / (users − 1).

The workspace: ``--workspace scale`` (default): the 100k-passage wiki of ``bench/scale_bench.py`` (its
cache folder; converted and built there first if missing, ~4 min) copied beside fresh copies of the
bundled example wikis, all in the one composition ``load``, so each question searches 100k+ passages;
``--workspace examples``: the example wikis alone (a quick run). Built in a folder of its own
(``--home``, default a temporary one), removed at the end unless ``--home`` is given.

Run from the repository root::

    python bench/load_app.py [--users 50] [--questions 10] [--processes 1] [--workspace scale|examples]
                             [--think 3 10] [--home DIR] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

SEED = 35
COMP = "load"
ANSWER_TIMEOUT = 60.0
TARGETS = {"first_token_p95_s": 1.5, "answer_p95_s": 3.0, "errors": 0}


def log(msg: str) -> None:
    print(f"[load_app] {msg}", file=sys.stderr, flush=True)


def pct(values: list[float], q: int) -> float:
    if not values:
        return float("nan")
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


# --- the workspace ------------------------------------------------------------------------------------

def make_workspace(home: Path, kind: str, users: int, scale_cache: Path | None) -> dict[str, Any]:
    """The example wikis (fresh copies, built), with the scale bench's 100k-passage wiki for ``scale``;
    one composition ``load`` over all of them; ``users`` accounts at its level."""
    import bcrypt
    import yaml

    from wikirag import Workspace, build

    wikis = home / "wikis"
    wikis.mkdir(parents=True)
    for folder in sorted((REPO / "wikis").iterdir()):
        if (folder / ".wiki.yaml").is_file():
            shutil.copytree(folder, wikis / folder.name, ignore=shutil.ignore_patterns(".index"))
    names = sorted(p.name for p in wikis.iterdir())
    passages = 0
    ws = Workspace(home)
    for name in names:
        passages += build(ws.wiki(name)).chunks
    if kind == "scale":
        import scale_bench

        cache = scale_cache or (Path(os.environ.get("WIKIRAG_CACHE", Path.home() / ".cache" / "wikirag")) / "scale-bench")
        cache.mkdir(parents=True, exist_ok=True)
        digest, _, _ = scale_bench.convert(scale_bench.DEFAULT_EVAL, cache)
        built = scale_bench.build_workspace(cache / "one", scale_bench.layouts(cache)["one"], digest)
        shutil.copytree(cache / "one" / "wikis" / "all", wikis / "all", symlinks=True)  # its index, same source
        names.append("all")
        passages += built["chunks"]
    ws = Workspace(home)
    level = max((ws.wiki(n).level for n in names), key=int)
    (home / "rags").mkdir()
    (home / "rags" / f"{COMP}.yaml").write_text(yaml.safe_dump(
        {"name": COMP, "description": "every wiki of the load bench", "sensitivity": str(level), "default": True,
         "wikis": names}, sort_keys=False), encoding="utf-8")
    hashed = bcrypt.hashpw(b"load-bench-password", bcrypt.gensalt(rounds=4)).decode()
    (home / "users.yaml").write_text(yaml.safe_dump(
        {"users": {f"load-{i:03d}": {"password": hashed, "clearance": str(level)} for i in range(users)}}),
        encoding="utf-8")
    return {"wikis": names, "passages": passages, "level": str(level)}


def session_tokens(home: Path, users: int) -> list[str]:
    """A signed-in server-side session per person (what a password sign-in creates; the browser then sends
    its token as the ``wikirag_session`` cookie)."""
    from wikirag.sessions import SessionStore
    from wikirag.users import UserStore

    accounts, store = UserStore(home / "users.yaml"), SessionStore(home)
    return [store.start(accounts.authenticate(f"load-{i:03d}", "load-bench-password"))[0] for i in range(users)]


# --- the app processes --------------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_app(home: Path) -> tuple[subprocess.Popen, int]:
    port = free_port()
    env = {**os.environ, "WIKIRAG_HOME": str(home), "WIKIRAG_AUDIT": str(home / ".audit" / f"audit-{port}.jsonl")}
    env.pop("WIKIRAG_USERS", None)
    env.pop("WIKIRAG_DEMO", None)
    with open(home / f"app-{port}.log", "w") as errors:  # the child keeps its own copy of the descriptor
        proc = subprocess.Popen([sys.executable, "-m", "wikirag", "--home", str(home), "app", "--port", str(port),
                                 "--address", "127.0.0.1"], env=env, stdout=subprocess.DEVNULL, stderr=errors,
                                start_new_session=True)
    deadline = time.monotonic() + 90
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=1) as r:
                if r.read() == b"ok":
                    return proc, port
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"the app did not start: see {home / f'app-{port}.log'}")
        time.sleep(0.2)


def rss_mb(proc: subprocess.Popen) -> float:
    """Resident memory of the app's process group (the app and whatever it started), MB."""
    total = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            if os.getpgid(int(pid)) != proc.pid:
                continue
            status = Path(f"/proc/{pid}/status").read_text()
        except (OSError, ProcessLookupError):
            continue
        total += next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:")), 0)
    return total / 1024


# --- one person ---------------------------------------------------------------------------------------

class Page:
    """One browser tab's websocket session with Streamlit's protocol."""

    def __init__(self, ws: Any):
        self.ws = ws
        self.chat_input: str | None = None

    async def run(self, question: str | None = None) -> dict[str, Any]:
        """Rerun the page (with ``question`` in the chat input); read until the run ends. Returns the
        seconds to the first answer text and to the end, and an error (or None)."""
        from streamlit.proto.BackMsg_pb2 import BackMsg
        from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

        back = BackMsg()
        back.rerun_script.query_string = ""
        back.rerun_script.page_script_hash = ""
        back.rerun_script.page_name = "chat"
        if question is not None:
            widget = back.rerun_script.widget_states.widgets.add()
            widget.id = self.chat_input
            widget.chat_input_value.data = question
        started = time.perf_counter()
        await self.ws.send(back.SerializeToString())
        first = error = None
        echoed = question is None
        deadline = started + ANSWER_TIMEOUT
        while True:
            raw = await asyncio.wait_for(self.ws.recv(), timeout=max(0.1, deadline - time.perf_counter()))
            msg = ForwardMsg()
            msg.ParseFromString(raw)
            kind = msg.WhichOneof("type")
            if kind == "script_finished":
                # a run ends early for a rerun (the chat's own st.rerun() after an answer, or a rerun that
                # overtook it): the answer is the first text after the question's echo, in whichever run
                if question is None or first is not None or error is not None or msg.script_finished == 0 and echoed:
                    break
                continue
            if kind == "new_session" and question is not None and first is None:
                echoed = False  # a new run: the answer is the text after the question's echo in this run
                continue
            if kind != "delta" or msg.delta.WhichOneof("type") != "new_element":
                continue
            element = msg.delta.new_element
            what = element.WhichOneof("type")
            if what == "chat_input":
                self.chat_input = element.chat_input.id
            elif what == "exception":
                error = f"exception: {element.exception.type}: {element.exception.message}"
            elif what == "alert" and element.alert.format == 1:  # ERROR
                error = f"error shown: {element.alert.body[:200]}"
            elif what == "markdown" and question is not None:
                if not echoed:
                    echoed = element.markdown.body.strip() == question.strip()
                elif first is None and element.markdown.element_type != 2:  # not a caption
                    first = time.perf_counter() - started
        end = time.perf_counter() - started
        if question is not None and first is None and error is None:
            error = "no answer text"
        return {"first_s": first, "answer_s": end, "error": error}


async def person(i: int, port: int, token: str, questions: list[str], think: tuple[float, float], ramp: float,
                 out: list[dict], opened: list[int], rng: random.Random) -> None:
    import websockets

    await asyncio.sleep(rng.uniform(0, ramp))
    try:
        async with websockets.connect(f"ws://127.0.0.1:{port}/_stcore/stream", subprotocols=["streamlit"],
                                      additional_headers={"Cookie": f"wikirag_session={token}",
                                                          "Origin": f"http://127.0.0.1:{port}"},
                                      max_size=None, open_timeout=30, ping_interval=None) as ws:
            page = Page(ws)
            loaded = await page.run()
            opened.append(i)
            if page.chat_input is None:
                out.append({"user": i, "question": None, "error": loaded["error"] or "no chat input on the page"})
                return
            for q in questions:
                await asyncio.sleep(rng.uniform(*think))
                try:
                    got = await page.run(q)
                except (asyncio.TimeoutError, TimeoutError):
                    got = {"first_s": None, "answer_s": ANSWER_TIMEOUT, "error": "no end within 60 s"}
                out.append({"user": i, "question": q, **got})
                if got["error"] and got["error"].startswith("no end"):
                    return
    except Exception as exc:  # noqa: BLE001 - a closed socket or a refused connection is an error of the run
        out.append({"user": i, "question": None, "error": f"{type(exc).__name__}: {exc}"})


async def crowd(ports: list[int], tokens: list[str], questions: list[list[str]], think: tuple[float, float],
                ramp: float, procs: list[subprocess.Popen]) -> tuple[list[dict], float]:
    out: list[dict] = []
    opened: list[int] = []
    rngs = [random.Random(SEED * 1000 + i) for i in range(len(tokens))]
    peak = [0.0]

    async def sample() -> None:
        while True:
            peak[0] = max(peak[0], sum(rss_mb(p) for p in procs))
            await asyncio.sleep(0.5)

    sampler = asyncio.create_task(sample())
    await asyncio.gather(*(person(i, ports[i % len(ports)], tokens[i], questions[i], think, ramp, out, opened,
                                  rngs[i]) for i in range(len(tokens))))
    sampler.cancel()
    return out, peak[0]


def one_session(port: int, token: str, question: str) -> dict[str, Any]:
    """One person alone: the warm-up (indexes loaded, models started) and the one-session memory."""
    import websockets

    async def go() -> dict[str, Any]:
        async with websockets.connect(f"ws://127.0.0.1:{port}/_stcore/stream", subprotocols=["streamlit"],
                                      additional_headers={"Cookie": f"wikirag_session={token}",
                                                          "Origin": f"http://127.0.0.1:{port}"},
                                      max_size=None, ping_interval=None) as ws:
            page = Page(ws)
            await page.run()
            return await page.run(question)

    return asyncio.run(go())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=50)
    parser.add_argument("--questions", type=int, default=10, help="questions per person")
    parser.add_argument("--processes", type=int, default=1, help="app processes over the workspace")
    parser.add_argument("--workspace", choices=("scale", "examples"), default="scale")
    parser.add_argument("--think", type=float, nargs=2, default=(10.0, 30.0), metavar=("MIN", "MAX"),
                        help="seconds between an answer and the next question (default 10 30)")
    parser.add_argument("--ramp", type=float, default=10.0, help="seconds over which the people arrive")
    parser.add_argument("--home", type=Path, help="build the workspace here and keep it (default: temporary)")
    parser.add_argument("--scale-cache", type=Path, help="bench/scale_bench.py's cache folder")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    home = (args.home or Path(tempfile.mkdtemp(prefix="wikirag-load-"))) / "ws"
    if home.exists():
        shutil.rmtree(home)
    started = time.perf_counter()
    data = make_workspace(home, args.workspace, args.users, args.scale_cache)
    log(f"workspace {home}: {len(data['wikis'])} wikis, {data['passages']:,} passages "
        f"({time.perf_counter() - started:.0f} s)")
    tokens = session_tokens(home, args.users)
    pool = [json.loads(line)["question"] for line in (REPO / "bench" / "questions.jsonl").read_text().splitlines()
            if line.strip()]
    questions = [random.Random(SEED + i).sample(pool, args.questions) for i in range(args.users)]
    procs, ports = [], []
    try:
        for _ in range(args.processes):
            proc, port = start_app(home)
            procs.append(proc)
            ports.append(port)
        base = sum(rss_mb(p) for p in procs)
        warm = [one_session(port, tokens[0], pool[0]) for port in ports]  # one person on each process
        one = sum(rss_mb(p) for p in procs)
        took = ", ".join(f"{w['answer_s']:.2f} s" for w in warm)
        log(f"{args.processes} app process(es) up; one session each answered in {took}; {one:.0f} MB")
        ran = time.perf_counter()
        rows, peak = asyncio.run(crowd(ports, tokens, questions, tuple(args.think), args.ramp, procs))
        seconds = time.perf_counter() - ran
        after = sum(rss_mb(p) for p in procs)
    finally:
        for proc in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=30)
        if args.home is None:
            shutil.rmtree(home.parent, ignore_errors=True)
    answers = [r for r in rows if r.get("question")]
    errors = [r for r in rows if r.get("error")]
    first = [r["first_s"] for r in answers if r.get("first_s") is not None]
    whole = [r["answer_s"] for r in answers if not r.get("error")]
    fig = {"users": args.users, "questions_each": args.questions, "processes": args.processes,
           "workspace": args.workspace, "wikis": len(data["wikis"]), "passages": data["passages"],
           "answers": len(answers), "errors": len(errors), "error_examples": sorted({e["error"] for e in errors})[:5],
           "first_token_p50_s": round(pct(first, 50), 3), "first_token_p95_s": round(pct(first, 95), 3),
           "answer_p50_s": round(pct(whole, 50), 3), "answer_p95_s": round(pct(whole, 95), 3),
           "answer_max_s": round(max(whole), 3) if whole else None,
           "answers_per_s": round(len(answers) / seconds, 2), "run_s": round(seconds, 1),
           "rss_start_mb": round(base, 1), "rss_one_session_mb": round(one, 1), "rss_peak_mb": round(peak, 1),
           "rss_after_mb": round(after, 1),
           "mb_per_extra_session": round((peak - one) / max(1, args.users - 1), 2)}
    if args.json:
        print(json.dumps(fig, indent=1))
        return
    ok = {"first_token_p95_s": fig["first_token_p95_s"] <= TARGETS["first_token_p95_s"],
          "answer_p95_s": fig["answer_p95_s"] <= TARGETS["answer_p95_s"], "errors": fig["errors"] == 0}
    print(f"{args.users} people × {args.questions} questions, {args.processes} app process(es), "
          f"{fig['passages']:,} passages in {fig['wikis']} wikis, think {args.think[0]:g}–{args.think[1]:g} s")
    print("| measure | value | target |\n|---|---:|---|")
    print(f"| errors | {fig['errors']} of {fig['answers']} answers | 0 {'✓' if ok['errors'] else '✗'} |")
    print(f"| first token p50 / p95 | {fig['first_token_p50_s']:.2f} / {fig['first_token_p95_s']:.2f} s | "
          f"p95 ≤ 1.5 s {'✓' if ok['first_token_p95_s'] else '✗'} |")
    print(f"| whole answer p50 / p95 (max) | {fig['answer_p50_s']:.2f} / {fig['answer_p95_s']:.2f} s "
          f"({fig['answer_max_s']} s) | p95 ≤ 3 s {'✓' if ok['answer_p95_s'] else '✗'} |")
    print(f"| answers per second | {fig['answers_per_s']} | |")
    print(f"| memory: one session / peak | {fig['rss_one_session_mb']:.0f} / {fig['rss_peak_mb']:.0f} MB | |")
    print(f"| memory per extra session | {fig['mb_per_extra_session']:.2f} MB | stated |")
    if errors:
        print("errors:", "; ".join(fig["error_examples"]))


if __name__ == "__main__":
    main()
