"""Benchmark: the tldr pages as 11 wikis fused in one composition vs the same files as ONE wiki.

Reads the 11 folders ``<eval-dir>/markdown/tldr-*`` (read-only; referenced by path, never copied) and
builds, in a fresh temporary workspace (``tempfile.mkdtemp``, removed at the end):

* ``fused``: one wiki per folder (``source: <folder>``) and a composition listing all 11;
* ``single``: one wiki over ``<eval-dir>/markdown/tldr-*/*.md`` and a composition listing it.

It measures

1. build seconds and chunks/s of fresh builds (``force=True``) per wiki, summed over the 11, and for
   the single wiki (median of 3 interleaved repeats, after one untimed warm-up build that pays the
   one-time tokenizer load); then the time of a no-change rebuild (``up to date``);
2. query latency p50/p95 (ms) and queries/s through ``wikirag.retrieval.search(ws, comp, q,
   clearance="public", k=10)`` after a warm-up, with the SAME queries for both compositions: the
   ``> description`` line of randomly sampled pages, or "how do I <first example>" (fixed seed),
   run in 3 rounds alternating the two setups; plus the ratio fused_p50 / single_p50 (target ≤ 1.2);
3. resident memory after loading each setup, each in its own subprocess: current RSS after the
   imports and after loading (``/proc/self/statm``), and the peak. The peak is ``VmHWM`` from
   ``/proc/self/status``: on Linux ``ru_maxrss`` survives fork+exec, so a child would report this
   process's peak; ``ru_maxrss`` is the fallback where ``/proc`` is missing.

Run from the repo root::

    python bench/tldr_bench.py [--eval-dir PATH] [--queries N] [--json] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import random
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from wikirag.index import build
from wikirag.retrieval import search
from wikirag.wiki import write_manifest
from wikirag.workspace import Workspace

REPO = Path(__file__).resolve().parents[1]
DEFAULT_EVAL = REPO.parent / "shared" / "eval"
SEED = 1234
K = 10
WARMUP = 20
REPEATS = 3
SETUPS = {"fused": "tldr-fused", "single": "tldr-single"}
SINGLE_WIKI = "tldr-all"


def tldr_folders(eval_dir: Path) -> list[Path]:
    root = eval_dir / "markdown"
    folders = sorted(p for p in root.glob("tldr-*") if p.is_dir()) if root.is_dir() else []
    if not folders:
        sys.exit(f"error: no tldr-* folders under {root}: pass --eval-dir PATH (the folder holding "
                 "markdown/tldr-*)")
    return folders


def make_workspace(home: Path, folders: list[Path]) -> None:
    """Write the wiki manifests (11 + single + warm-up) and the 2 compositions; builds nothing."""
    sources = {f.name: str(f) for f in folders}
    sources[SINGLE_WIKI] = str(folders[0].parent / "tldr-*" / "*.md")
    sources["warmup"] = str(min(folders, key=lambda f: len(list(f.iterdir()))))
    for name, source in sources.items():
        write_manifest(home / "wikis" / name, {"name": name, "title": name, "sensitivity": "public",
                                               "source": source})
    (home / "rags").mkdir(parents=True, exist_ok=True)
    for comp, wikis in ((SETUPS["fused"], [f.name for f in folders]), (SETUPS["single"], [SINGLE_WIKI])):
        data = {"name": comp, "sensitivity": "public", "wikis": wikis}
        (home / "rags" / f"{comp}.yaml").write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")


def _clean(line: str) -> str:
    """Drop tldr's ``[c]reate`` brackets and ``{{placeholders}}`` markup, keep the words."""
    line = re.sub(r"\[(\w*)\]", r"\1", line)
    return re.sub(r"[`{}]", "", line).strip().rstrip(":.")


def make_queries(folders: list[Path], n: int) -> list[str]:
    """``n`` questions from randomly sampled pages (fixed seed): description line or first example."""
    rng = random.Random(SEED)
    pages = sorted(p for f in folders for p in f.glob("*.md"))
    queries: list[str] = []
    for page in rng.sample(pages, min(len(pages), n * 2)):
        lines = page.read_text(encoding="utf-8").splitlines()
        desc = next((_clean(ln[1:]) for ln in lines if ln.startswith(">")), "")
        example = next((_clean(ln[1:]) for ln in lines if ln.startswith("- ")), "")
        text = (f"how do I {example[:1].lower()}{example[1:]}" if example and (rng.random() < 0.5 or not desc)
                else desc)
        if len(text) > 8 and not text.startswith("More information"):
            queries.append(text)
        if len(queries) == n:
            break
    return queries


def timed_builds(ws: Workspace, names: list[str], force: bool) -> list[dict[str, Any]]:
    rows = []
    for name in names:
        started = time.perf_counter()
        report = build(ws.wiki(name), force=force)
        seconds = time.perf_counter() - started
        rows.append({"wiki": name, "state": report.state, "files": report.files, "chunks": report.chunks,
                     "seconds": seconds, "chunks_per_s": report.chunks / seconds})
    return rows


def total(rows: list[dict[str, Any]], label: str) -> dict[str, Any]:
    chunks, seconds = sum(r["chunks"] for r in rows), sum(r["seconds"] for r in rows)
    return {"wiki": label, "state": rows[0]["state"], "files": sum(r["files"] for r in rows),
            "chunks": chunks, "seconds": seconds, "chunks_per_s": chunks / seconds}


def median_builds(runs: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Per wiki, the repeat with the median build time."""
    return [sorted(rows, key=lambda r: r["seconds"])[len(rows) // 2] for rows in zip(*runs, strict=True)]


def run_queries(ws: Workspace, queries: list[str]) -> dict[str, dict[str, float]]:
    """Latencies of each setup over ``REPEATS`` rounds that alternate the setups (drift hits both)."""
    times: dict[str, list[float]] = {key: [] for key in SETUPS}
    wall = dict.fromkeys(SETUPS, 0.0)
    hits = dict.fromkeys(SETUPS, 0)
    for comp in SETUPS.values():  # warm-up: loads every index into the process cache
        for q in queries[:WARMUP]:
            search(ws, comp, q, clearance="public", k=K)
    for _ in range(REPEATS):
        for key, comp in SETUPS.items():
            started = time.perf_counter()
            for q in queries:
                t0 = time.perf_counter()
                result = search(ws, comp, q, clearance="public", k=K)
                times[key].append((time.perf_counter() - t0) * 1000)
                hits[key] += bool(result.passages)
            wall[key] += time.perf_counter() - started
    out = {}
    for key, ms in times.items():
        cuts = statistics.quantiles(ms, n=100, method="inclusive")
        out[key] = {"p50_ms": statistics.median(ms), "p95_ms": cuts[94], "mean_ms": statistics.fmean(ms),
                    "qps": len(ms) / wall[key], "answered": hits[key] // REPEATS}
    return out


def rss_mb() -> float:
    """The current resident set in MB (Linux ``/proc``; 0 elsewhere)."""
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
    except OSError:
        return 0.0
    return pages * resource.getpagesize() / 2**20


def peak_rss_mb() -> float:
    """This process's peak resident set in MB: ``VmHWM`` (not inherited), else ``ru_maxrss``."""
    try:
        found = re.search(r"^VmHWM:\s+(\d+) kB", Path("/proc/self/status").read_text(), re.MULTILINE)
    except OSError:
        found = None
    kb = int(found.group(1)) if found else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return kb / 1024


def memory_child(home: Path, comp: str) -> None:
    """(subprocess) Load one setup through a few searches; print its RSS figures in MB as JSON."""
    before = rss_mb()
    ws = Workspace(home)
    for q in ("extract an archive", "list network interfaces", "show disk usage"):
        search(ws, comp, q, clearance="public", k=K)
    print(json.dumps({"rss_imports_mb": before, "rss_loaded_mb": rss_mb(), "rss_peak_mb": peak_rss_mb()}))


def measure_memory(home: Path, comp: str) -> dict[str, float]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--memory-child", comp, "--home", str(home)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def profile(ws: Workspace, comp: str, queries: list[str], top: int = 25) -> str:
    prof = cProfile.Profile()
    prof.enable()
    for q in queries:
        search(ws, comp, q, clearance="public", k=K)
    prof.disable()
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats("cumulative").print_stats(top)
    return buf.getvalue()


def render(fig: dict[str, Any]) -> str:
    out = [f"## Builds (fresh, force=True; median of {REPEATS})", "",
           "| wiki | files | chunks | seconds | chunks/s |", "|---|---:|---:|---:|---:|"]
    for r in [*fig["builds"]["per_wiki"], fig["builds"]["fused_total"], fig["builds"]["single"]]:
        bold = "**" if r["wiki"] in ("11 wikis (sum)", SINGLE_WIKI) else ""
        out.append(f"| {bold}{r['wiki']}{bold} | {r['files']} | {r['chunks']} | {r['seconds']:.2f} | "
                   f"{r['chunks_per_s']:,.0f} |")
    out += ["", "## No-change rebuild", "", "| setup | state | seconds |", "|---|---|---:|"]
    for key, r in fig["rebuild"].items():
        out.append(f"| {key} | {r['state']} | {r['seconds']:.3f} |")
    q = fig["queries"]
    out += ["", f"## Queries ({q['n']} queries x {REPEATS} rounds, k={K}, after {WARMUP} warm-up queries)",
            "", ("| setup | p50 ms | p95 ms | mean ms | queries/s | answered | RSS imports MB | RSS loaded MB "
                 "| RSS peak MB |"), "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for key in SETUPS:
        r, m = q[key], fig["memory"][key]
        out.append(f"| {key} | {r['p50_ms']:.2f} | {r['p95_ms']:.2f} | {r['mean_ms']:.2f} | {r['qps']:.0f} "
                   f"| {r['answered']} | {m['rss_imports_mb']:.0f} | {m['rss_loaded_mb']:.0f} "
                   f"| {m['rss_peak_mb']:.0f} |")
    verdict = "met" if q["ratio_p50"] <= 1.2 else "NOT met"
    out += ["", f"fused_p50 / single_p50 = **{q['ratio_p50']:.2f}** (target ≤ 1.2: {verdict})"]
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--eval-dir", type=Path, default=DEFAULT_EVAL, help=f"default: {DEFAULT_EVAL}")
    parser.add_argument("--queries", type=int, default=500, help="number of queries (default 500)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--profile", action="store_true", help="cProfile the fused queries (to stderr)")
    parser.add_argument("--memory-child", help=argparse.SUPPRESS)
    parser.add_argument("--home", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory_child:
        memory_child(args.home, args.memory_child)
        return
    if not args.eval_dir.is_dir():
        sys.exit(f"error: eval folder {args.eval_dir} does not exist: pass --eval-dir PATH")
    if args.queries < WARMUP:
        sys.exit(f"error: --queries must be at least {WARMUP}")
    folders = tldr_folders(args.eval_dir)
    home = Path(tempfile.mkdtemp(prefix="tldr-bench-"))
    try:
        make_workspace(home, folders)
        ws = Workspace(home)
        names = [f.name for f in folders]
        timed_builds(ws, ["warmup"], force=True)  # untimed: loads tiktoken, markdown-it, bm25s once
        fused_runs, single_runs = [], []
        for _ in range(REPEATS):
            fused_runs.append(timed_builds(ws, names, force=True))
            single_runs.append(timed_builds(ws, [SINGLE_WIKI], force=True))
        per_wiki, single = median_builds(fused_runs), median_builds(single_runs)[0]
        rebuild = {"11 wikis": total(timed_builds(ws, names, force=False), "11 wikis"),
                   "single": timed_builds(ws, [SINGLE_WIKI], force=False)[0]}
        queries = make_queries(folders, args.queries)
        lat = run_queries(ws, queries)
        fig: dict[str, Any] = {
            "builds": {"per_wiki": per_wiki, "fused_total": total(per_wiki, "11 wikis (sum)"),
                       "single": single},
            "rebuild": rebuild,
            "queries": {"n": len(queries), "rounds": REPEATS, **lat,
                        "ratio_p50": lat["fused"]["p50_ms"] / lat["single"]["p50_ms"]},
            "memory": {key: measure_memory(home, comp) for key, comp in SETUPS.items()},
        }
        if args.profile:
            print(profile(ws, SETUPS["fused"], queries), file=sys.stderr)
        print(json.dumps(fig, indent=1) if args.json else render(fig))
    finally:
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
