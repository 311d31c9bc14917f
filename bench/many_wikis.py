"""Benchmark: query latency of a composition of many small wikis (default 200, one page each).

    python bench/many_wikis.py [--wikis 200] [--queries 50]

Builds the wikis in a temporary workspace, loads them with one warm-up query, then times ``search``
over ``--queries`` questions and prints p50/p95 in ms (the unit test checks only that every wiki is
searched and the right one wins; the timing lives here).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from wikirag import Workspace, build, search


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wikis", type=int, default=200)
    parser.add_argument("--queries", type=int, default=50)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        (home / "rags").mkdir()
        names = [f"w{i:03d}" for i in range(args.wikis)]
        ws = Workspace(home)
        started = time.perf_counter()
        for i, name in enumerate(names):
            folder = home / "wikis" / name
            folder.mkdir(parents=True)
            (folder / ".wiki.yaml").write_text(f"name: {name}\ntitle: {name}\nsensitivity: public\n")
            (folder / "page.md").write_text(f"# Page {i}\n\nNotes number {i} about compost, keys and deploys.\n")
            build(ws.wiki(name))
        built = time.perf_counter() - started
        (home / "rags" / "many.yaml").write_text("sensitivity: public\nwikis: [" + ", ".join(names) + "]\nk: 10\n")
        search(ws, "many", "compost", clearance="public", audit_event=None)  # loads every index
        times = []
        for q in range(args.queries):
            target = 10 + q % (args.wikis - 10)  # two digits at least: one-character words are not indexed
            t = time.perf_counter()
            result = search(ws, "many", f"notes number {target} compost", clearance="public", audit_event=None)
            times.append((time.perf_counter() - t) * 1000)
            assert result.passages[0].wiki == names[target], (target, result.passages[0].wiki)
    times.sort()
    print(f"{args.wikis} wikis built in {built:.1f} s; query p50 {statistics.median(times):.1f} ms, "
          f"p95 {times[int(0.95 * (len(times) - 1))]:.1f} ms over {len(times)} queries")


if __name__ == "__main__":
    main()
