"""Do follow-up questions get answered? Conversations of 2–3 turns, each turn asked with the turns before it.

Runs ``bench/dialogues.jsonl`` (conversations written for this over the example wikis and their four
compositions; each turn with the page that answers it and 1–2 exact facts a right answer contains, and a
``kind``: ``first``, ``follow-up`` — elliptical or pronoun questions that need the earlier turn, such as
"What about Fridays?" after a release-window question —, ``self-contained`` — a later turn that names its
own topic and must not drift to the earlier one — or ``switch`` — a later turn on another subject) through
:func:`wikirag.answers.answer` with ``history=`` the conversation so far (one
:class:`wikirag.followup.Exchange` per earlier turn: question, searched question, answer text), in a
workspace of its own: a temporary copy of ``wikis/`` and ``rags/`` built fresh (``answer_eval``'s builder,
without the tldr wiki). Every later turn is also asked alone, with no history. Reports, per mode:

* **first turns right** (every expected fact in the answer *and* the expected page cited by a citation
  whose passage holds its sentence — the rule of ``answer_eval``);
* **follow-ups right**, asked in the conversation: the main figure (target ≥ 85 %);
* **self-contained + switch right**, and **answered as alone**: the share of those turns whose answer with
  the history is the answer without it, or both are right (target ≥ 90 %: history must not pull a
  self-contained question back to the earlier topic);
* **follow-ups right alone**: the follow-ups asked with no history — what the rewrite buys;
* how often a rewrite happened (``result.rewrite`` not "none") on follow-ups and on self-contained +
  switch turns (ideally 100 % and 0 %);
* rewrite milliseconds (``result.rewrite_seconds``) p50 / p95 over the later turns, and answer
  milliseconds (rewrite + retrieval + answer, warm: after one untimed question per composition) p50 / p95
  over every turn asked in its conversation.

Run from the repository root::

    python bench/dialogue_eval.py [--modes extractive local] [-k 5] [--workspace DIR] [--dialogues PATH]
                                  [--json] [--show]

``--workspace DIR`` builds there once and reuses it on the next run (delete it after an index change);
``--show`` prints every wrong turn with the question that was searched and the start of its answer.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from answer_eval import _norm, workspace  # noqa: E402

from wikirag import Workspace  # noqa: E402
from wikirag.answers import answer  # noqa: E402
from wikirag.followup import Exchange  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
DIALOGUES = REPO / "bench" / "dialogues.jsonl"
LATER_OTHER = ("self-contained", "switch")


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, round(q * (len(values) - 1)))]


def _share(rows: list[dict], key: str) -> float | None:
    return sum(bool(r[key]) for r in rows) / len(rows) if rows else None


def _judge(turn: dict, result) -> dict:
    """Whether ``result`` answers ``turn``: every fact in the text and the expected page cited (supported)."""
    text = _norm(result.text)
    cited = {(c.wiki, c.path) for c in result.citations if c.n not in result.unsupported_citations}
    facts = bool(turn["facts"]) and all(_norm(f) in text for f in turn["facts"])
    page_cited = (turn["wiki"], turn["page"]) in cited
    return {"facts": facts, "page_cited": page_cited, "right": facts and page_cited}


def _ask(ws: Workspace, conv: dict, question: str, mode: str, k: int, history: list[Exchange]):
    started = time.perf_counter()
    result = answer(ws, conv["composition"], question, clearance=conv["clearance"], model=mode, k=k,
                    history=history).result
    return result, time.perf_counter() - started


def run(home: Path, modes: list[str], k: int, dialogues: Path) -> dict:
    ws = Workspace(home)
    convs = [json.loads(line) for line in dialogues.read_text().splitlines() if line.strip()]
    convs = [c for c in convs if (home / "rags" / f"{c['composition']}.yaml").is_file()]
    turns = [t for c in convs for t in c["turns"]]
    report: dict = {"conversations": len(convs), "turns": len(turns),
                    "kinds": {kind: sum(t["kind"] == kind for t in turns)
                              for kind in ("first", "follow-up", "self-contained", "switch")},
                    "modes": {}}
    for mode in modes:
        for first in {c["composition"]: c for c in convs}.values():  # warm: models loaded, every index cached
            _ = answer(ws, first["composition"], "Where do I start?", clearance=first["clearance"], model=mode,
                       k=k).result
        rows = []
        for conv in convs:
            history: list[Exchange] = []
            for i, turn in enumerate(conv["turns"]):
                result, seconds = _ask(ws, conv, turn["question"], mode, k, history)
                history.append(Exchange.of(result))
                row = {"id": conv["id"], "turn": i + 1, "composition": conv["composition"], "kind": turn["kind"],
                       "question": turn["question"], "searched": result.searched, "rewrite": result.rewrite,
                       "rewrite_s": result.rewrite_seconds, "seconds": seconds, "answer": result.text,
                       "expected": f"{turn['wiki']}/{turn['page']}", "facts_expected": turn["facts"],
                       "cited": sorted({f"{c.wiki}/{c.path}" for c in result.citations
                                        if c.n not in result.unsupported_citations}),
                       "error": result.error, **_judge(turn, result)}
                if i:  # the same question with no history: what it gets without the conversation
                    alone, _ = _ask(ws, conv, turn["question"], mode, k, [])
                    judged = _judge(turn, alone)
                    row["alone_right"] = judged["right"]
                    row["alone_answer"] = alone.text
                    row["as_alone"] = alone.text == result.text or (judged["right"] and row["right"])
                rows.append(row)
                mark = "ok" if row["right"] else "--"
                print(f"{mode}: {mark} {conv['id']}.{i + 1} {turn['kind']}: {turn['question'][:60]}"
                      + (f"  → {result.searched[:70]}" if result.searched != turn["question"] else ""),
                      file=sys.stderr)
        first = [r for r in rows if r["kind"] == "first"]
        follow = [r for r in rows if r["kind"] == "follow-up"]
        other = [r for r in rows if r["kind"] in LATER_OTHER]
        later = follow + other
        answer_ms = [r["seconds"] * 1000 for r in rows]
        rewrite_ms = [r["rewrite_s"] * 1000 for r in later]
        report["modes"][mode] = {
            "first_right": _share(first, "right"),
            "followup_right": _share(follow, "right"),
            "other_right": _share(other, "right"),
            "other_as_alone": _share(other, "as_alone"),
            "followup_right_alone": _share(follow, "alone_right"),
            "other_right_alone": _share(other, "alone_right"),
            "followup_rewritten": sum(r["rewrite"] != "none" for r in follow) / len(follow) if follow else None,
            "other_rewritten": sum(r["rewrite"] != "none" for r in other) / len(other) if other else None,
            "rewrites": {how: sum(r["rewrite"] == how for r in later) for how in sorted({r["rewrite"] for r in later})},
            "followup_right_by_composition": {
                comp: _share([r for r in follow if r["composition"] == comp], "right")
                for comp in sorted({r["composition"] for r in follow})},
            "errors": sum(1 for r in rows if r["error"]),
            "rewrite_ms_p50": _pct(rewrite_ms, 0.5), "rewrite_ms_p95": _pct(rewrite_ms, 0.95),
            "answer_ms_p50": statistics.median(answer_ms) if answer_ms else None,
            "answer_ms_p95": _pct(answer_ms, 0.95),
            "rows": rows,
        }
    return report


def _fmt(value: float | None, pct: bool = True, digits: int = 0) -> str:
    if value is None:
        return "–"
    return f"{value:.0%}" if pct else f"{value:.{digits}f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--modes", nargs="+", default=["extractive"])
    parser.add_argument("-k", type=int, default=5)
    parser.add_argument("--dialogues", type=Path, default=DIALOGUES)
    parser.add_argument("--workspace", type=Path, help="build here once and reuse (default: a temporary one)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--show", action="store_true", help="print every wrong turn")
    args = parser.parse_args()
    # answer_eval's builder, with no tldr wiki (an eval folder that cannot exist; its note is not news here)
    with contextlib.redirect_stderr(io.StringIO()):
        home, made = workspace(args.workspace, Path(os.devnull), tldr_dense=False)
    try:
        report = run(home, args.modes, args.k, args.dialogues)
    finally:
        if made:
            shutil.rmtree(home, ignore_errors=True)
    if args.json:
        print(json.dumps(report, indent=2, ensure_ascii=False))
        return
    kinds = report["kinds"]
    print(f"{report['conversations']} conversations, {report['turns']} turns ({kinds['first']} first, "
          f"{kinds['follow-up']} follow-up, {kinds['self-contained']} self-contained, {kinds['switch']} switch), "
          f"k = {args.k}\n")
    print("| mode | first right | follow-ups right | follow-ups right alone | self-contained + switch right "
          "| answered as alone | rewritten: follow-ups / others | rewrite ms p50 / p95 | answer ms p50 / p95 "
          "| errors |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for mode, r in report["modes"].items():
        print(f"| {mode} | {_fmt(r['first_right'])} | {_fmt(r['followup_right'])} | {_fmt(r['followup_right_alone'])} "
              f"| {_fmt(r['other_right'])} | {_fmt(r['other_as_alone'])} "
              f"| {_fmt(r['followup_rewritten'])} / {_fmt(r['other_rewritten'])} "
              f"| {_fmt(r['rewrite_ms_p50'], False, 1)} / {_fmt(r['rewrite_ms_p95'], False, 1)} "
              f"| {_fmt(r['answer_ms_p50'], False)} / {_fmt(r['answer_ms_p95'], False)} | {r['errors']} |")
    if args.show:
        for mode, r in report["modes"].items():
            for row in r["rows"]:
                drifted = row["kind"] in LATER_OTHER and not row["as_alone"]
                if row["right"] and not drifted:
                    continue
                why = [w for w, bad in (("facts missing", not row["facts"]), ("page not cited", not row["page_cited"]),
                                        ("differs from alone", drifted)) if bad]
                print(f"\n[{mode}] {row['id']}.{row['turn']} {row['kind']} ({', '.join(why)}): {row['question']}\n"
                      f"  searched ({row['rewrite']}): {row['searched']}\n"
                      f"  expected {row['expected']} {row['facts_expected']}; cited {row['cited']}\n"
                      f"  answer: {' '.join(row['answer'].split())[:200]}")


if __name__ == "__main__":
    main()
