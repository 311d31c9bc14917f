"""Questions pasted from PDFs, Word and terminals: their stray characters are cleaned away and the
question is answered (:func:`wikirag.retrieval.check_question`), in a search, ``wikirag ask`` and
``wikirag eval``; only what cannot be made into a question is refused (tests/test_bad_input.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from wikirag import Workspace
from wikirag.beir import read_queries
from wikirag.cli import cli
from wikirag.errors import EvalError, QueryError
from wikirag.retrieval import check_question, search

from .conftest import FIXTURES

CLEAN = "watering tomatoes — how often?"
# the same question as pasted: an em dash that was a Windows-1252 byte (U+0097), a no-break space, a
# zero-width space inside a word, a NUL between words, a byte-order mark and a line break at the end
PASTED = "watering\u00a0toma\u200btoes \x97 how\x00often?\ufeff\r\n"


@pytest.mark.parametrize(("pasted", "cleaned"), [
    # C1 controls that are Windows-1252 bytes read as Latin-1: the character cp1252 meant
    ("2019\x962020", "2019–2020"),
    ("mulch\x97then water", "mulch—then water"),
    ("don\x92t \x91prune\x92", "don’t ‘prune’"),
    ("\x93tomato\x94 \x85", "“tomato” …"),
    ("\x95 compost \x80 5", "• compost € 5"),
    ("\x8aibenik", "Šibenik"),
    # the five C1 codes cp1252 leaves undefined, other C0 controls and DEL: a space (they separate words)
    ("water\x00tomatoes", "water tomatoes"),
    ("water\x81tomatoes\x9d", "water tomatoes"),
    ("water\x07tomatoes\x7f", "water tomatoes"),
    ("\x1b[31mwater\x1b[0m tomatoes", "water tomatoes"),  # a terminal colour code goes whole
    ("\x1b]0;title\x07water", "water"),
    # tab, line breaks and every Unicode space: a space; runs of them one space; the ends stripped
    ("  how\toften\r\nto\u000bwater\u000c ", "how often to water"),
    ("water\u00a0tomatoes\u2009daily\u202fnow\u3000水\u2028x\u2029y", "water tomatoes daily now 水 x y"),
    # format characters: removed (they sit inside words)
    ("toma\u200btoes", "tomatoes"),
    ("toma\u00adtoes", "tomatoes"),
    ("\ufefftomatoes\u2060", "tomatoes"),
    ("to\u200cma\u200dtoes", "tomatoes"),
    ("\u202etomatoes\u202c\u200e", "tomatoes"),
    # PDF ligatures become letters; NFC composes an accent typed as a combining mark
    ("\ufb01sh \ufb02ower \ufb00 \ufb03", "fish flower ff ffi"),
    ("cafe\u0301 pur\u00e9e", "café purée"),
    # text that is fine is left as it is
    ("how often to water tomatoes?", "how often to water tomatoes?"),
    ("🍅 tomatoes 水 ñ", "🍅 tomatoes 水 ñ"),
    # blank as typed: not refused (the search says it is empty), nor is punctuation typed on its own
    ("", ""),
    (" \t\n\u00a0", ""),
    ("?", "?"),
])
def test_each_kind_of_stray_character_is_cleaned(pasted: str, cleaned: str) -> None:
    assert check_question(pasted) == cleaned
    assert check_question(cleaned) == cleaned  # cleaning clean text changes nothing


def test_the_pasted_question_reads_as_the_clean_one() -> None:
    assert check_question(PASTED) == CLEAN


@pytest.mark.parametrize(("question", "expected"), [
    ("\x00", r"^the question is empty after removing control characters: character 1 is U\+0000, and no letter or "
             r"digit is left; type the question, or paste it as plain text$"),
    ("  \x97\u200b ?", r"^the question is empty after removing control characters: character 3 is U\+0097"),
    ("\ufeff", r"character 1 is U\+FEFF"),
    ("\x1b[0m", r"character 1 is U\+001B"),
    ("water \udcff", r"^the question is not valid text: character 7 is U\+DCFF, a lone surrogate \(the byte 0xff"),
    ("w\x00" * 5001, r"^the question is too long: 10,002 characters, at most 10,000"),  # checked as given
    ("\ufb03" * 4000, r"^the question is too long: 12,000 characters once cleaned, at most 10,000"),
    (b"water", r"^the question is not valid text: it is bytes, not str; decode it to str first$"),
    (42, r"^the question is not valid text: it is int, not str; pass the question as a str$"),
])
def test_what_cannot_be_made_into_a_question_is_refused(question, expected: str) -> None:
    with pytest.raises(QueryError, match=expected):
        check_question(question)


def _found(result) -> list[tuple]:
    return [(p.wiki, p.path, p.start, p.end, p.score) for p in result.passages]


@pytest.mark.parametrize(("composition", "clearance"), [("open", "public"), ("team", "internal")])
def test_a_pasted_question_finds_the_passages_of_the_clean_one(built: Workspace, composition: str,
                                                              clearance: str) -> None:
    clean = search(built, composition, CLEAN, clearance=clearance)
    pasted = search(built, composition, PASTED, clearance=clearance)
    assert clean.passages and clean.passages[0].path == "tomatoes.md"
    assert _found(pasted) == _found(clean)
    assert pasted.question == CLEAN and pasted.hint is None
    one_word = search(built, composition, "toma\u200btoes\x00", clearance=clearance)  # not "toma" and "toes"
    assert _found(one_word) == _found(search(built, composition, "tomatoes", clearance=clearance))


def test_ask_answers_a_pasted_question_as_the_clean_one(built: Workspace, home: Path) -> None:
    def ask(question: str) -> dict:
        out = CliRunner().invoke(cli, ["--home", str(home), "ask", "open", question, "--model", "extractive",
                                       "--json"])
        assert out.exit_code == 0, out.output
        return json.loads(out.stdout)

    clean, pasted = ask(CLEAN), ask(PASTED)
    assert pasted["passages"] and pasted["passages"][0]["path"] == "tomatoes.md"
    assert [(p["path"], p["start"], p["end"]) for p in pasted["passages"]] == \
        [(p["path"], p["start"], p["end"]) for p in clean["passages"]]
    assert pasted["question"] == pasted["searched"] == CLEAN
    assert pasted["text"] == clean["text"] and not pasted["error"]
    refused = CliRunner().invoke(cli, ["--home", str(home), "ask", "open", "\x00\u200b", "--model", "extractive"])
    assert refused.exit_code == 1
    assert refused.stderr.startswith("Error: the question is empty after removing control characters: character 1 "
                                     "is U+0000")


# wikirag eval: a query with control characters is cleaned and scored; one that cannot be searched is skipped --

def _collection(folder: Path, extra: dict[str, str]) -> Path:
    """tests/fixtures/beir/garden copied to ``folder/garden``, with ``extra`` queries judged like q1."""
    data = folder / "garden"
    shutil.copytree(FIXTURES / "beir" / "garden", data)
    with (data / "queries.jsonl").open("a", encoding="utf-8") as fh:
        for qid, text in extra.items():
            fh.write(json.dumps({"_id": qid, "text": text}, ensure_ascii=False) + "\n")
    with (data / "qrels" / "test.tsv").open("a", encoding="utf-8") as fh:
        for qid in extra:
            fh.write(f"{qid}\tg1\t2\n{qid}\tg2\t1\n")
    return data


def _eval(data: Path, cache: Path, *more: str):
    out = CliRunner().invoke(cli, ["eval", str(data), "--cache", str(cache), "--fusion", "dfs", *more])
    assert out.exit_code == 0, out.output
    return out


def test_eval_cleans_a_query_and_skips_one_it_cannot_search(tmp_path: Path) -> None:
    pasted = _collection(tmp_path / "pasted", {"q4": "how\x97often\u00a0to water\x00toma\u200btoes\ufeff",
                                               "q5": "\x00\x1b\u200b\x97"})
    clean = _collection(tmp_path / "clean", {"q4": "how—often to water tomatoes"})
    out = _eval(pasted, tmp_path / "cache-pasted", "--json")
    report = json.loads(out.stdout)
    assert report["datasets"] == {"garden": {"docs": 8, "queries": 4}}  # q1–q3, q4; q5 skipped
    assert report["skipped"] == [{"dataset": "garden", "id": "q5", "reason": (
        "the question is empty after removing control characters: character 1 is U+0000, and no letter or digit is "
        "left; type the question, or paste it as plain text")}]
    assert "warning: query q5 of garden skipped: the question is empty after removing control characters" in out.stderr
    expected = json.loads(_eval(clean, tmp_path / "cache-clean", "--json").stdout)
    assert expected["datasets"] == report["datasets"] and expected["skipped"] == []
    for method in ("dfs", "monolith", "oracle"):  # the pasted q4 is scored exactly as the clean one
        assert report["results"][method]["per_dataset"] == expected["results"][method]["per_dataset"]
    assert report["results"]["oracle"]["per_dataset"]["garden"]["ndcg@10"] > 0.8
    table = _eval(pasted, tmp_path / "cache-pasted").stdout
    assert "1 query skipped (cannot be searched), left out of the means: garden/q5" in table


def test_eval_of_own_judgments_skips_a_query_it_cannot_search(built: Workspace, home: Path, tmp_path: Path) -> None:
    queries, qrels = tmp_path / "q.tsv", tmp_path / "qrels.tsv"
    queries.write_bytes("\ufeff1\thow often\x97to water\u00a0tomatoes\r\n2\t\x00\u200b\r\n3\t\x00\n".encode())
    qrels.write_text("query-id\tcorpus-id\tscore\n1\talpha/tomatoes.md\t1\n2\tbeta/deploys.md\t1\n")
    args = ["--home", str(home), "eval", "team", "--queries", str(queries), "--qrels", str(qrels),
            "--clearance", "internal", "--fusion", "dfs-prior", "--json"]
    out = CliRunner().invoke(cli, args)
    assert out.exit_code == 0, out.output
    report = json.loads(out.stdout)
    assert report["results"]["dfs-prior"]["per_dataset"]["team"]["ndcg@10"] == pytest.approx(1.0)
    assert report["datasets"]["team"]["queries"] == 1
    assert [(s["id"], s["reason"][:55]) for s in report["skipped"]] == [  # 3 is not judged: not listed
        ("2", "the question is empty after removing control characters")]
    qrels.write_text("query-id\tcorpus-id\tscore\n2\tbeta/deploys.md\t1\n")
    nothing = CliRunner().invoke(cli, args)
    assert nothing.exit_code == 1
    assert nothing.stderr.startswith("Error: no judged query can be searched: all 1 were skipped (the first: 2: "
                                     "the question is empty after removing control characters")


def test_a_queries_file_that_is_not_utf8_gets_its_line(tmp_path: Path) -> None:
    path = tmp_path / "queries.tsv"
    path.write_bytes(b"q1\thow often to water\nq2\tmulch \x97 then water\n")  # saved as Windows-1252
    with pytest.raises(EvalError, match=r"queries\.tsv:2: not UTF-8 \(the byte 0x97\): save the file as UTF-8"):
        read_queries(path)
    path.write_bytes("\ufeffq1\tmulch\x97then\r\nq2\twater\rq3\t\x00\n".encode())
    assert read_queries(path) == [("q1", "mulch\x97then"), ("q2", "water"), ("q3", "\x00")]
