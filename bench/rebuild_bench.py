"""Query latency while a big wiki rebuilds (issue 18): idle, vs a background build, vs a build in a thread.

The wiki: the tldr pages of ``<eval-dir>/markdown/tldr-*/*.md`` (read-only), written ``--copies`` times
(``c0/``, ``c1/``, …: same text, other folders) into one wiki of a temporary workspace (deleted at the
end), with a composition ``bench`` of it alone; built once, untimed. The queries: ``--queries`` (300)
questions drawn from the pages with a fixed seed (:func:`tldr_bench.make_queries`).

Queries run from this process through ``wikirag.search(ws, "bench", q, clearance="public", k=10,
audit_event=None)``, one at a time with ``--gap`` seconds (0.02) between them: a busy app, not a loop
that takes a whole core. Rows:

* ``idle``: the queries with nothing else running (after 20 warm-up queries);
* ``background``: while ``wikirag.background.start(ws, wiki, force=True)`` rebuilds the wiki in a child
  process (spawn, niceness +10): queries loop over the list until the new build is published (``CURRENT``
  changes) or the build ends;
* ``background, nice 0``: the same, with ``background.NICE = 0`` (the process alone, no priority);
* ``thread``: while ``wikirag.index.build(wiki, force=True)`` runs in a thread of this process, as the
  portal did before: the build's Python work and the queries share one GIL.

Every query must return passages (errors and empty results are counted). The build's own time in each
row is ``BuildReport.seconds``; "then, first query" is the first query once the index cache has
noticed the new build (it loads it), measured on its own after each build. The machine's other load
moves the numbers: run it a few times.

    python bench/rebuild_bench.py [--eval-dir PATH] [--copies 5] [--queries 300] [--gap 0.02] [--json]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tldr_bench

from wikirag import Workspace, background, build, search
from wikirag.store import current_build_id

WIKI, COMP = "tldr", "bench"
WARMUP = 20


def make_workspace(home: Path, folders: list[Path], copies: int) -> int:
    """The wiki (every tldr page, ``copies`` times) and its composition; returns the number of pages."""
    folder = home / "wikis" / WIKI
    pages = 0
    for c in range(copies):
        for source in folders:
            target = folder / f"c{c}" / source.name
            shutil.copytree(source, target)
            pages += sum(1 for _ in target.glob("*.md"))
    (folder / ".wiki.yaml").write_text(f"name: {WIKI}\ntitle: tldr x{copies}\nsensitivity: public\n",
                                       encoding="utf-8")
    (home / "rags").mkdir(parents=True, exist_ok=True)
    (home / "rags" / f"{COMP}.yaml").write_text(f"sensitivity: public\nwikis: [{WIKI}]\n", encoding="utf-8")
    return pages


def query(ws: Workspace, q: str) -> tuple[float, bool]:
    started = time.perf_counter()
    try:
        ok = bool(search(ws, COMP, q, clearance="public", k=10, audit_event=None).passages)
    except Exception:  # noqa: BLE001 - counted, the bench goes on
        ok = False
    return time.perf_counter() - started, ok


def run(ws: Workspace, queries: list[str], gap: float, until: Callable[[], bool] | None = None) -> dict:
    """The queries in turn (looping while ``until()`` is False, if given; else each once)."""
    seconds, failed, i = [], 0, 0
    while (until is None and i < len(queries)) or (until is not None and not until()):
        took, ok = query(ws, queries[i % len(queries)])
        seconds.append(took)
        failed += not ok
        i += 1
        time.sleep(gap)
    return summary(seconds, failed)


def summary(seconds: list[float], failed: int) -> dict:
    ms = sorted(s * 1000 for s in seconds)
    def pct(p: float) -> float:
        return ms[min(len(ms) - 1, int(p * len(ms)))] if ms else float("nan")

    return {"queries": len(ms), "failed": failed, "p50_ms": statistics.median(ms) if ms else float("nan"),
            "p95_ms": pct(0.95), "p99_ms": pct(0.99), "max_ms": ms[-1] if ms else float("nan")}


def reload_ms(ws: Workspace, queries: list[str]) -> float:
    """The first query once the index cache rechecks ``CURRENT`` after a build: it loads the new build."""
    time.sleep(ws.recheck_seconds + 0.1)
    return query(ws, queries[0])[0] * 1000


def published(ws: Workspace) -> Callable[[], bool]:
    """True once the build that runs now has replaced the serving one (``CURRENT`` names another build)."""
    before = current_build_id(ws.wiki(WIKI))
    return lambda: current_build_id(ws.wiki(WIKI)) != before


def during_background(ws: Workspace, queries: list[str], gap: float, nice: int) -> dict:
    background.NICE = nice
    done = published(ws)
    job = background.start(ws, WIKI, force=True)
    row = run(ws, queries, gap, until=lambda: done() or not job.running)
    job.wait()
    if job.state != "built":
        sys.exit(f"error: the background build ended {job.state}: {job.error}")
    return {**row, "build_s": job.seconds, "wall_s": job.elapsed, "reload_ms": reload_ms(ws, queries)}


def during_thread(ws: Workspace, queries: list[str], gap: float) -> dict:
    report: list = []
    done = published(ws)
    started = time.perf_counter()
    thread = threading.Thread(target=lambda: report.append(build(ws.wiki(WIKI), force=True, progress=lambda *a: None)))
    thread.start()
    row = run(ws, queries, gap, until=lambda: done() or not thread.is_alive())
    thread.join()
    if not report or report[0].state != "built":
        sys.exit("error: the build in a thread failed")
    return {**row, "build_s": report[0].seconds, "wall_s": time.perf_counter() - started,
            "reload_ms": reload_ms(ws, queries)}


def render(fig: dict) -> str:
    title = (f"Rebuild of one wiki of {fig['pages']:,} pages ({fig['chunks']:,} passages); queries every "
             f"{fig['gap'] * 1000:.0f} ms, k=10, this process.")
    lines = [title, "",
             "| while | queries | failed | p50 ms | p95 ms | p99 ms | max ms | build s | then, first query ms |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for label, row in fig["rows"].items():
        build_s, reload = (f"{row['build_s']:.1f}", f"{row['reload_ms']:.0f}") if "build_s" in row else ("–", "–")
        lines.append(f"| {label} | {row['queries']} | {row['failed']} | {row['p50_ms']:.1f} | {row['p95_ms']:.1f} "
                     f"| {row['p99_ms']:.1f} | {row['max_ms']:.0f} | {build_s} | {reload} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--eval-dir", type=Path, default=tldr_bench.DEFAULT_EVAL)
    parser.add_argument("--copies", type=int, default=5)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--gap", type=float, default=0.02)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    folders = tldr_bench.tldr_folders(args.eval_dir)
    queries = tldr_bench.make_queries(folders, args.queries)
    with tempfile.TemporaryDirectory(prefix="wikirag-rebuild-bench-") as tmp:
        home = Path(tmp)
        pages = make_workspace(home, folders, args.copies)
        ws = Workspace(home)
        first = build(ws.wiki(WIKI))
        print(f"[setup] {pages} pages, {first.chunks} passages, first build {first.seconds:.1f} s", file=sys.stderr)
        for q in queries[:WARMUP]:
            query(ws, q)
        rows = {"idle": run(ws, queries, args.gap)}
        before = current_build_id(ws.wiki(WIKI))
        rows["background (process, nice +10)"] = during_background(ws, queries, args.gap, background.NICE)
        rows["background (process, nice 0)"] = during_background(ws, queries, args.gap, 0)
        rows["thread of this process"] = during_thread(ws, queries, args.gap)
        assert current_build_id(ws.wiki(WIKI)) != before
        fig = {"pages": pages, "chunks": first.chunks, "gap": args.gap, "rows": rows}
    print(json.dumps(fig, indent=2) if args.json else render(fig))


if __name__ == "__main__":
    main()
