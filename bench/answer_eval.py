"""Do the answers answer? Every answer mode on the question set, with the ranking that feeds it.

Runs ``bench/questions.jsonl`` (questions written for this over the example wikis and a tldr-pages
wiki; each answerable one with the page that answers it and 1–2 exact facts a right answer contains,
the rest answered by no page) through :func:`wikirag.answers.answer` — retrieval, answer, citation
check — in a workspace of its own: a temporary copy of ``wikis/`` and ``rags/`` built fresh, plus a
wiki ``tldr-common`` over ``<eval-dir>/markdown/tldr-common`` (read in place, never copied; with the
dense layer unless ``--tldr-bm25-only``) and a composition ``tldr`` listing it. Reports

* ranking (once, it is the same for every mode): hit@1 and hit@3, the share of answerable questions
  whose expected page is the first passage / among the first three; and facts@1 / facts@k, the share
  whose first passage / any passage (of the expected page) holds every expected fact — the ceiling of
  an extractive answer;
* per mode: **right** (every expected fact in the answer *and* the expected page cited), right in
  the first sentence (the answer's lead alone holds the facts, the page cited), facts,
  page cited, refusals ("The passages do not contain the answer.") on the unanswerable, false
  refusals on the answerable, invalid citations (naming no passage), unsupported citations (a cited
  passage that does not hold its sentence's terms), answer milliseconds (retrieval + answer, warm:
  after one untimed question of its own per composition, so no timed question's vectors are
  cached) median and p95, and time to first token.

Run from the repository root (the local model starts on demand; stop it with ``wikirag serve-model --stop``)::

    python bench/answer_eval.py [--modes extractive local] [-k 5] [--workspace DIR] [--fusion NAME] [--json] [--show]

``--workspace DIR`` builds there once and reuses it on the next run (delete it after an index change).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from wikirag import Workspace
from wikirag.answers import answer
from wikirag.prompt import NO_ANSWER

REPO = Path(__file__).resolve().parents[1]
EVAL_DIR = REPO.parent / "shared" / "eval"
QUESTIONS = REPO / "bench" / "questions.jsonl"


def _norm(text: str) -> str:
    return " ".join(text.lower().replace("**", "").replace("`", "").split())


def workspace(folder: Path | None, eval_dir: Path | None, tldr_dense: bool = True,
              prefix: str = "answer-eval-") -> tuple[Path, bool]:
    """A built copy of the example wikis and compositions, plus the tldr wiki (with the dense layer, as
    every example wiki has, unless ``tldr_dense`` is false: embedding its 4,600 pages takes minutes; none
    without ``eval_dir``); (path, made now). ``folder`` is reused if it holds a workspace already."""
    if folder is not None and (folder / "rags").is_dir():
        return folder, False
    home = folder or Path(tempfile.mkdtemp(prefix=prefix))
    home.mkdir(parents=True, exist_ok=True)
    shutil.copytree(REPO / "wikis", home / "wikis", ignore=shutil.ignore_patterns(".index", "__pycache__"))
    shutil.copytree(REPO / "rags", home / "rags")
    tldr = eval_dir / "markdown" / "tldr-common" if eval_dir is not None else None
    if tldr is not None and tldr.is_dir():
        (home / "wikis" / "tldr-common").mkdir()
        (home / "wikis" / "tldr-common" / ".wiki.yaml").write_text(
            f"name: tldr-common\ntitle: tldr pages (common)\nsensitivity: public\nsource: {tldr}\n"
            + ("layers:\n  dense: {}\n" if tldr_dense else ""))
        (home / "rags" / "tldr.yaml").write_text("name: tldr\nsensitivity: public\nwikis: [tldr-common]\n")
    elif tldr is not None:
        print(f"note: {tldr} not found: the tldr questions are left out", file=sys.stderr)
    subprocess.run([sys.executable, "-m", "wikirag", "--home", str(home), "build", "--all"], check=True,
                   stdout=subprocess.DEVNULL)
    return home, folder is None


def run(home: Path, modes: list[str], k: int, questions: Path, fusion: str | None = None) -> dict:
    ws = Workspace(home)
    items = [json.loads(line) for line in questions.read_text().splitlines() if line.strip()]
    items = [q for q in items if (home / "rags" / f"{q['composition']}.yaml").is_file()]
    answerable = [q for q in items if q["answerable"]]
    report: dict = {"questions": len(items), "answerable": len(answerable), "modes": {}}
    ranking, holding = [], []
    for mode in modes:
        for first in {q["composition"]: q for q in items}.values():  # warm: models loaded, every index cached
            _ = answer(ws, first["composition"], "Where do I start?", clearance=first["clearance"], model=mode,
                       k=k).result
        rows = []
        for q in items:
            started = time.perf_counter()
            result = answer(ws, q["composition"], q["question"], clearance=q["clearance"], model=mode, k=k,
                            fusion=fusion).result
            seconds = time.perf_counter() - started
            expected = (q["wiki"], q["page"])
            pages = [(p.wiki, p.path) for p in result.passages]
            # a citation counts only where its passage holds the statement it is cited for
            cited = {(c.wiki, c.path) for c in result.citations if c.n not in result.unsupported_citations}
            text = _norm(result.text)
            row = {
                "id": q["id"], "question": q["question"], "answerable": q["answerable"], "answer": result.text,
                "refused": _norm(NO_ANSWER) in text,
                "facts": bool(q["facts"]) and all(_norm(f) in text for f in q["facts"]),
                # the answer's first sentence alone holds them (the answer answers first)
                "lead": bool(q["facts"]) and all(_norm(f) in _norm(result.text.split("\n\n")[0]) for f in q["facts"]),
                "page_cited": expected in cited,
                "rank": pages.index(expected) + 1 if expected in pages else None,
                # the first passage of the expected page that holds every fact: what an answer can quote
                "fact_rank": next((i for i, p in enumerate(result.passages, start=1) if (p.wiki, p.path) == expected
                                   and q["facts"] and all(_norm(f) in _norm(p.text) for f in q["facts"])), None),
                "invalid": len(result.invalid_citations),
                "unsupported": len(result.unsupported_citations),
                "error": result.error,
                "first_token_s": result.first_token_seconds, "seconds": seconds,
            }
            row["right"] = row["facts"] and row["page_cited"]
            rows.append(row)
            mark = ("ok" if row["right"] else "--") if q["answerable"] else ("ok" if row["refused"] else "--")
            print(f"{mode}: {mark} {q['id']}: {q['question'][:70]}", file=sys.stderr)
        if not ranking:
            ranking = [r["rank"] for r in rows if r["answerable"]]
            holding = [r["fact_rank"] for r in rows if r["answerable"]]
        yes = [r for r in rows if r["answerable"]]
        no = [r for r in rows if not r["answerable"]]
        ms = sorted(r["seconds"] * 1000 for r in rows)
        report["modes"][mode] = {
            "right": sum(r["right"] for r in yes) / len(yes),
            "facts": sum(r["facts"] for r in yes) / len(yes),
            "lead": sum(r["lead"] and r["page_cited"] for r in yes) / len(yes),
            "page_cited": sum(r["page_cited"] for r in yes) / len(yes),
            "refusals": sum(r["refused"] for r in no) / len(no) if no else None,
            "false_refusals": sum(r["refused"] for r in yes) / len(yes),
            "invalid_citations": sum(r["invalid"] for r in rows),
            "unsupported_citations": sum(r["unsupported"] for r in rows),
            "errors": sum(1 for r in rows if r["error"]),
            "answer_ms_median": statistics.median(ms),
            "answer_ms_p95": ms[min(len(ms) - 1, round(0.95 * (len(ms) - 1)))],
            "first_token_s_median": statistics.median(r["first_token_s"] or 0 for r in rows),
            "rows": rows,
        }
    report["hit@1"] = sum(r == 1 for r in ranking) / len(ranking)
    report["hit@3"] = sum(r is not None and r <= 3 for r in ranking) / len(ranking)
    report[f"hit@{k}"] = sum(r is not None for r in ranking) / len(ranking)
    report["facts@1"] = sum(r == 1 for r in holding) / len(holding)
    report[f"facts@{k}"] = sum(r is not None for r in holding) / len(holding)
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--modes", nargs="+", default=["extractive", "local"])
    parser.add_argument("-k", type=int, default=5)
    parser.add_argument("--questions", type=Path, default=QUESTIONS)
    parser.add_argument("--workspace", type=Path, help="build here once and reuse (default: a temporary one)")
    parser.add_argument("--eval-dir", type=Path, default=EVAL_DIR)
    parser.add_argument("--tldr-bm25-only", action="store_true", help="build the tldr wiki without the dense layer")
    parser.add_argument("--no-rerank", action="store_true", help="turn the second stage off (retrieval.RERANK_DEPTH = 0)")
    parser.add_argument("--fusion", help="a fusion method instead of each composition's (e.g. dfs-prior, dfs)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--show", action="store_true", help="print every wrong answer")
    args = parser.parse_args()
    if args.no_rerank:
        from wikirag import retrieval

        retrieval.RERANK_DEPTH = 0
    home, made = workspace(args.workspace, args.eval_dir, not args.tldr_bm25_only)
    try:
        report = run(home, args.modes, args.k, args.questions, args.fusion)
    finally:
        if made:
            shutil.rmtree(home, ignore_errors=True)
    if args.json:
        print(json.dumps(report, indent=2, ensure_ascii=False))
        return
    print(f"{report['questions']} questions ({report['answerable']} answerable), k = {args.k}: "
          f"hit@1 {report['hit@1']:.0%}, hit@3 {report['hit@3']:.0%}, hit@{args.k} {report[f'hit@{args.k}']:.0%}; "
          f"a passage holding the facts first {report['facts@1']:.0%}, among the {args.k} {report[f'facts@{args.k}']:.0%}\n")
    print("| mode | right (facts + page cited) | right in the first sentence | facts | page cited "
          "| refusals (unanswerable) | false refusals | invalid | unsupported | answer ms p50 / p95 | first token s |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for mode, r in report["modes"].items():
        refusals = f"{r['refusals']:.0%}" if r["refusals"] is not None else "–"
        print(f"| {mode} | {r['right']:.0%} | {r['lead']:.0%} | {r['facts']:.0%} | {r['page_cited']:.0%} | {refusals} "
              f"| {r['false_refusals']:.0%} | {r['invalid_citations']} | {r['unsupported_citations']} "
              f"| {r['answer_ms_median']:.0f} / {r['answer_ms_p95']:.0f} | {r['first_token_s_median']:.2f} |")
    if args.show:
        for mode, r in report["modes"].items():
            for row in r["rows"]:
                wrong = not row["right"] if row["answerable"] else not row["refused"]
                if wrong:
                    print(f"\n[{mode}] {row['id']} (rank {row['rank']}): {row['question']}\n{row['answer']}")


if __name__ == "__main__":
    main()
