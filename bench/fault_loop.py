"""Kill `wikirag build` with SIGKILL at random moments, many times; the index must always survive.

A wiki of a few hundred pages is built once. Then, each round: one page is edited, ``wikirag build
NAME --force`` starts in a subprocess, and after a random delay (up to a typical build's duration) it
is killed with SIGKILL. After every kill the index must load and answer a query (the previous build or
the new one, never garbage); at the end a normal build must succeed and leave no debris. Reports how
many builds were killed mid-way, how many finished first, and how many loads failed (must be 0).

    python bench/fault_loop.py [--rounds 200] [--pages 300] [--json]

The test suite runs it with a few rounds (tests/test_faults.py).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from wikirag import Workspace, build, search, store


def make_workspace(home: Path, pages: int) -> Workspace:
    folder = home / "wikis" / "crash"
    folder.mkdir(parents=True)
    (folder / ".wiki.yaml").write_text("name: crash\ntitle: Crash test\nsensitivity: public\n")
    for i in range(pages):
        (folder / f"page{i:04d}.md").write_text(
            f"# Page {i}\n\n" + " ".join(f"Sentence {j} of page {i} about resilient builds and keys." for j in range(40))
            + "\n")
    (home / "rags").mkdir()
    (home / "rags" / "crash.yaml").write_text("sensitivity: public\nwikis: [crash]\n")
    ws = Workspace(home, recheck_seconds=0)
    build(ws.wiki("crash"))
    return ws


def run(rounds: int, pages: int, seed: int = 7) -> dict:
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        ws = make_workspace(home, pages)
        started = time.perf_counter()
        subprocess.run([sys.executable, "-m", "wikirag", "--home", str(home), "build", "crash", "--force"],
                       check=True, capture_output=True)
        typical = time.perf_counter() - started
        killed = finished = failed_loads = 0
        errors: list[str] = []
        for round_ in range(rounds):
            page = home / "wikis" / "crash" / f"page{rng.randrange(pages):04d}.md"
            page.write_text(page.read_text() + f"\nEdit {round_} adds a line.\n")
            process = subprocess.Popen(
                [sys.executable, "-m", "wikirag", "--home", str(home), "build", "crash", "--force"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(rng.uniform(0, typical * 1.1))
            if process.poll() is None:
                os.kill(process.pid, signal.SIGKILL)
                killed += 1
            else:
                finished += 1
            process.wait()
            try:
                store.load(ws.wiki("crash"))
                if not search(ws, "crash", "resilient builds", clearance="public", user="fault-loop").passages:
                    raise AssertionError("no passages")
            except Exception as exc:  # noqa: BLE001 - every failure is counted and reported
                failed_loads += 1
                errors.append(f"round {round_}: {type(exc).__name__}: {exc}")
        final = build(ws.wiki("crash"))
        debris = sorted(p.name for p in ws.wiki("crash").index_dir.iterdir()
                        if p.name.startswith(("tmp-", "CURRENT.")))
        return {"rounds": rounds, "pages": pages, "typical_build_s": round(typical, 2), "killed_mid_build": killed,
                "finished_before_kill": finished, "failed_loads": failed_loads, "errors": errors[:5],
                "final_build": final.state, "debris_after_final_build": debris}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--pages", type=int, default=300)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    report = run(args.rounds, args.pages)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        for key, value in report.items():
            print(f"{key}: {value}")
    sys.exit(0 if report["failed_loads"] == 0 and not report["debris_after_final_build"] else 1)


if __name__ == "__main__":
    main()
