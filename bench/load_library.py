"""Load: 1,000 queries from 8 threads against a composition of 11 wikis, through the library.

The 11 tldr-pages folders of ``../shared/eval/markdown`` (read-only) become 11 wikis in a temporary
workspace (built once, as bench/tldr_bench.py does); 1,000 questions drawn from the pages run through
``wikirag.search`` from 8 threads sharing one process (one Workspace, one index cache), as the app's
sessions do. Reports p50/p95/max latency, throughput and errors (must be 0).

    python bench/load_library.py [--queries 1000] [--threads 8] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tldr_bench

from wikirag import Workspace, build, search


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--eval-dir", type=Path, default=tldr_bench.DEFAULT_EVAL)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    folders = tldr_bench.tldr_folders(args.eval_dir)
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        tldr_bench.make_workspace(home, folders)
        ws = Workspace(home)
        for f in folders:
            build(ws.wiki(f.name))
        composition = tldr_bench.SETUPS["fused"]
        questions = tldr_bench.make_queries(folders, args.queries)
        search(ws, composition, questions[0], clearance="public")  # load the indexes once
        latencies: list[float] = []
        errors: list[str] = []
        lock = threading.Lock()
        cursor = iter(range(len(questions)))

        def worker() -> None:
            while True:
                with lock:
                    i = next(cursor, None)
                if i is None:
                    return
                started = time.perf_counter()
                try:
                    search(ws, composition, questions[i], clearance="public", k=10, user="load")
                except Exception as exc:  # noqa: BLE001 - counted and reported
                    with lock:
                        errors.append(f"{type(exc).__name__}: {exc}")
                    continue
                with lock:
                    latencies.append(time.perf_counter() - started)

        started = time.perf_counter()
        threads = [threading.Thread(target=worker) for _ in range(args.threads)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.perf_counter() - started
    ms = sorted(x * 1000 for x in latencies)
    report = {"wikis": len(folders), "queries": len(questions), "threads": args.threads, "errors": len(errors),
              "p50_ms": round(statistics.median(ms), 2), "p95_ms": round(ms[int(0.95 * (len(ms) - 1))], 2),
              "max_ms": round(ms[-1], 2), "queries_per_s": round(len(latencies) / wall, 1),
              "first_errors": errors[:3]}
    print(json.dumps(report, indent=2) if args.json else "\n".join(f"{k}: {v}" for k, v in report.items()))
    sys.exit(1 if errors else 0)


if __name__ == "__main__":
    main()
