"""Extractive answers: which markdown blocks sentences come from, exact offsets, IDF ranking."""

from __future__ import annotations

import pytest

from wikirag.extractive import extract, sentences
from wikirag.passage import Passage
from wikirag.prompt import NO_ANSWER, check_citations

PREFIX = "---\ntitle: x\n---\n"  # the passage sits after other text of its file: offsets are file offsets

CASES = {
    "paragraph": (
        "First sentence is long enough here. Second sentence follows it closely!\n",
        ["First sentence is long enough here.", "Second sentence follows it closely!"],
    ),
    "paragraph over lines": (
        "A sentence that runs over\ntwo lines of the file. Then another one here.\n",
        ["A sentence that runs over two lines of the file.", "Then another one here."],
    ),
    "list items": (
        ("- The first item is long enough.\n- The second item, also long enough,\n  continues here.\n"
         "1. An ordered item that is long enough.\n   - A nested item that is long enough.\n"),
        ["The first item is long enough.", "The second item, also long enough, continues here.",
         "An ordered item that is long enough.", "A nested item that is long enough."],
    ),
    "fenced code": (
        ("Text before the code block is long enough.\n\n```\nThis code line has a full stop. It stays whole.\n```\n"
         "~~~python\nprint('each code line is a block of its own')\n~~~\n"),
        ["Text before the code block is long enough.", "This code line has a full stop. It stays whole.",
         "print('each code line is a block of its own')"],  # a code line is a block, never cut, fences left out
    ),
    "indented code": (
        "Text before the indented block is long enough.\n\n    This indented line is code. Not split.\n\n    x = 1\n",
        ["Text before the indented block is long enough.", "This indented line is code. Not split.", "x = 1"],
    ),
    "short commands": (  # a command is an answer however short: a code line, or a paragraph of one code span
        "Find the process on a port:\n\n`lsof -i :8080`\n\nToo short. `ls` is. A `ls -a` in prose is not.\n",
        ["Find the process on a port:", "`lsof -i :8080`", "A `ls -a` in prose is not."],
    ),
    "headings": (
        ("# An ATX heading that is long enough\n\nSetext heading long enough to count\n---\n\n"
         "The body sentence is long enough here.\n"),
        ["The body sentence is long enough here."],
    ),
    "quote": (
        ("> A quoted sentence that is long enough.\n> Its second line is quoted as well.\n\n"
         "> - A list item inside a quote, long enough.\n"),
        ["A quoted sentence that is long enough.", "Its second line is quoted as well.",
         "A list item inside a quote, long enough."],
    ),
    "table": (
        "| Tier | Notify within |\n|---|---|\n| Tier 1 vendors | 24 hours of a breach |\n",
        ["| Tier | Notify within |", "| Tier 1 vendors | 24 hours of a breach |"],
    ),
    "html": (
        ("<!-- An editing note that is long enough. -->\n\n<div>A block of HTML that is long enough.</div>\n\n"
         "Plain text after the HTML is long enough.\n"),
        ["Plain text after the HTML is long enough."],
    ),
    "crlf": (
        "# Title\r\n\r\nA paragraph with Windows line breaks.\r\nIt goes on here, long enough.\r\n",
        ["A paragraph with Windows line breaks.", "It goes on here, long enough."],
    ),
    "short fragments": (
        "Too short. This one is long enough to keep.\n",
        ["This one is long enough to keep."],
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_sentences_come_from_prose_blocks_with_exact_offsets(name: str) -> None:
    text, expected = CASES[name]
    file_text = PREFIX + text + "\nTrailing text of the file."
    passage = Passage(2, "w", "p.md", len(PREFIX), len(PREFIX) + len(text), 4, "", 1.0, text)
    found = sentences(3, passage)
    assert [s.text for s in found] == expected
    for s in found:
        raw = file_text[s.start:s.end]
        assert s.n == 3 and raw == raw.strip() and " ".join(raw.split()) == s.text
        assert passage.start <= s.start < s.end <= passage.end


def test_a_leading_bom_does_not_hide_a_heading() -> None:
    text = "\ufeff# A heading that is long enough\n\nThe body sentence is long enough here.\n"
    passage = Passage(1, "w", "p.md", 0, len(text), 1, "", 1.0, text)
    assert [s.text for s in sentences(1, passage)] == ["The body sentence is long enough here."]


def test_rare_question_terms_weigh_more_and_rank_counts() -> None:
    text = ("Water the plants in the morning. Water tomatoes deeply twice a week. "
            "Water the lawn when it is dry.")
    passages = [Passage(1, "w", "a.md", 0, len(text), 1, "", 1.0, text)]
    answer, chosen = extract("water tomatoes", passages, limit=1)
    assert [s.text for s in chosen] == ["Water tomatoes deeply twice a week."]
    assert answer == "Water tomatoes deeply twice a week. [1]"  # the answer first, no list marker
    # the same sentence in the second passage loses to an equally good one in the first
    other = "Water tomatoes in the morning, at the roots."
    passages = [Passage(1, "w", "b.md", 0, len(other), 1, "", 1.0, other),
                Passage(2, "w", "a.md", 0, len(text), 1, "", 1.0, text)]
    assert extract("water tomatoes", passages, limit=1)[1][0].text == other


FUNDAMENTALS = Passage(
    1, "brewing", "fundamentals.md", 0, 300, 33, "Grind, temperature and ratios > Water temperature", 1.0,
    "## Water temperature\n\nHotter water extracts faster. For filter coffee, aim for 90–96 °C at the kettle.\n\n"
    "- **Light roasts:** 94–96 °C, or just off the boil.\n- **Dark roasts:** 86–90 °C. They extract easily.\n")
ICED = Passage(2, "brewing", "methods/cold-brew.md", 0, 200, 58, "Cold brew > Iced pour-over", 1.0,
               "## Iced pour-over\n\nPut 120 g of ice in the carafe and brew a V60 with 180 g of hot water at 94 °C.\n")


def test_the_sentence_that_answers_leads_and_at_most_two_support_it() -> None:
    text, chosen = extract("How hot should the water be for a V60?", [FUNDAMENTALS, ICED])
    # without retrieval's passage cosine (these passages have none) the iced sentence may lead; the
    # answering section's temperature is quoted all the same (with it, it leads: bench brew-01)
    assert "90–96 °C" in text or "94–96 °C" in text, text
    assert any(s.n == 1 for s in chosen) and 1 <= len(chosen) <= 3
    assert all(line.startswith("- ") for line in text.split("\n\n", 1)[1].split("\n")) if len(chosen) > 1 else True
    for s in chosen:  # verbatim, with the number of its passage
        p = [FUNDAMENTALS, ICED][s.n - 1]
        assert f"{s.text.replace('**', '')} [{s.n}]" in text.replace("**", "")
        assert " ".join(p.text[s.start - p.start:s.end - p.start].split()) == s.text


@pytest.mark.parametrize("question", ["What is the capital of France?", "Who won the world cup in 2018?",
                                      "How do I book a meeting room?"])
def test_a_question_the_passages_do_not_answer_is_refused(question: str) -> None:
    assert extract(question, [FUNDAMENTALS, ICED]) == (NO_ANSWER, [])


def test_without_the_model_the_choice_is_by_terms_alone() -> None:
    _text, chosen = extract("dark roast temperature", [FUNDAMENTALS, ICED], similarity=None)
    assert chosen and "86–90 °C" in chosen[0].text
    assert extract("What is the capital of France?", [FUNDAMENTALS], similarity=None) == (NO_ANSWER, [])


def test_extractive_citations_are_all_supported() -> None:
    text, _ = extract("How hot should the water be for a V60?", [FUNDAMENTALS, ICED])
    check = check_citations(text, [FUNDAMENTALS, ICED])
    assert check.citations and check.invalid == [] and check.unsupported == []



ROTATION = Passage(
    1, "security", "rotating.md", 0, 400, 1, "Rotating database credentials > When to rotate", 1.0,
    "## When to rotate\n\nRotating changes the service database password and switches the service to the new "
    "one without downtime.\n\n- **Scheduled:** every 90 days.\n- **Within 24 hours** after someone leaves.\n")


def test_a_sentence_holding_what_the_question_asks_for_leads(monkeypatch) -> None:
    question = "How often are service database passwords changed?"
    assert "every 90 days" in extract(question, [ROTATION], similarity=None)[1][0].text
    monkeypatch.setattr("wikirag.extractive.W_TYPE", 0.0)  # without the answer type, the terms win
    assert "every 90 days" not in extract(question, [ROTATION], similarity=None)[1][0].text


def test_a_code_comment_that_leads_brings_the_code_it_introduces() -> None:
    page = Passage(1, "guide", "troubleshooting.md", 0, 300, 1, "Troubleshooting > Encoding", 1.0,
                   "## Encoding\n\nPages must be UTF-8.\n\n```sh\n# prints nothing if the file is valid UTF-8\n"
                   "iconv -f UTF-8 -t UTF-8 page.md > /dev/null\n```\n")
    text, chosen = extract("Is the file valid UTF-8? It prints nothing?", [page], similarity=None)
    assert chosen[0].text.startswith("# prints nothing") and "iconv -f UTF-8 -t UTF-8 page.md" in chosen[1].text, text


def test_a_size_question_is_answered_by_a_size(monkeypatch) -> None:
    queue = Passage(1, "systems", "queue.md", 0, 300, 1, "Basalt Queue > Limits", 1.0,
                    "## Limits\n\nThe queue accepts messages from every service that holds a producer token.\n\n"
                    "- 256 KB maximum per message; put larger payloads in object storage.\n")
    question = "What is the largest message the queue accepts?"
    assert "256 KB" in extract(question, [queue], similarity=None)[1][0].text
    monkeypatch.setattr("wikirag.extractive.W_TYPE", 0.0)
    chosen = extract(question, [queue], similarity=None)[1]
    assert not chosen or "256 KB" not in chosen[0].text


def test_a_how_to_question_does_not_lead_with_what_not_to_do(monkeypatch) -> None:
    page = Passage(1, "security", "leaked-key.md", 0, 300, 1, "Leaked API key > Rotate the key", 1.0,
                   "## Rotate the key\n\nDon't rotate a leaked API key before you have told the security team.\n\n"
                   "To rotate the API key, create a new key, then revoke the leaked key at the provider.\n")
    question = "How do I rotate a leaked API key?"
    assert extract(question, [page])[1][0].text.startswith("To rotate")
    monkeypatch.setattr("wikirag.extractive.W_PROHIBITION", 0.0)
    assert extract(question, [page])[1][0].text.startswith("Don't rotate")


def test_a_chain_is_tested_for_a_word_no_wiki_has_by_its_sentence_read_alone() -> None:
    """The refusal for a rare word no wiki has looks at each sentence read alone. A sentence reached over
    links is embedded after its bridges (its ``cosine``), so the test takes its ``alone`` cosine: when every
    candidate is such a chain, the answer is no longer refused for want of a sentence read alone (a
    multi-hop question's describing words — "the credential issuer behind Lapwing" — are often in no wiki),
    and a chain near the question only through its bridges still is."""
    from wikirag.embeddings import vocabulary
    from wikirag.extractive import RARE_COSINE, Scored, Sentence, answers

    words = vocabulary()
    if words is None:
        pytest.skip("the offline MiniLM is not installed")
    question = "How many sign-in attempts does the zqxwvissuer behind Lapwing allow?"
    assert "zqxwvissuer" not in words

    def chained(alone: float) -> Scored:
        s = Sentence(1, 0, 10, "50 login attempts per minute per IP address.")
        return Scored(s, coverage=0.4, cosine=0.65, score=0.8, passage_cosine=0.6, chained=True, alone=alone)

    assert answers(question, [chained(RARE_COSINE + 0.2)], semantic=True, unknown=["zqxwvissuer"])
    assert not answers(question, [chained(RARE_COSINE - 0.2)], semantic=True, unknown=["zqxwvissuer"])


@pytest.mark.parametrize("question, answering, other", [
    ("On which weekday does the rotation hand over?", "Handover is on Mondays at 09:30.",
     "The rotation has six engineers in it."),
    ("Between which hours do they offer help?", "Support from 08:00 to 18:00 Stockholm time.",
     "Help is offered by the whole team."),
    ("How far in advance must they get the ticket?", "Open the ticket at least one sprint ahead.",
     "Tickets go in the STOR project."),
    ("How long are the planning cycles?", "The team plans in two-week sprints.", "Planning is done together."),
    ("How much time off does a week on call earn?", "Each week on call earns one day off.",
     "Time off is agreed with the manager."),
    ("Where is the analytics engine hosted?", "Hosted in region eu-north-1.", "The engine is columnar."),
    ("In which city do the engineers work?", "Six engineers in the Dublin office.", "The engineers work on payments."),
    ("How many engineers work in the group?", "Seven engineers, most of them in Stockholm.",
     "The group works on data."),
])
def test_what_a_question_asks_for_is_recognised(question: str, answering: str, other: str) -> None:
    """The answer types (ANSWER_TYPES, and the spelled numbers of a "how many"): a sentence holding what the
    question asks for outranks one that shares as many of its words but not the thing asked."""
    from wikirag.extractive import rank

    page = Passage(1, "w", "p.md", 0, 200, 1, "Page", 1.0, f"{other}\n\n{answering}\n")
    ranked = rank(question, [page], similarity=None)
    assert ranked[0].sentence.text == answering, [(c.sentence.text, c.coverage) for c in ranked]


def test_a_number_word_is_no_answer_to_how_often() -> None:
    """Spelled numbers count only for "how many": "two login roles" is no answer to "how often"."""
    from wikirag.extractive import rank

    page = Passage(1, "w", "p.md", 0, 200, 1, "Passwords", 1.0,
                   "Each service has two login roles for its passwords.\n\nService passwords are changed often, "
                   "every 90 days.\n")
    ranked = rank("How often are service passwords changed?", [page], similarity=None)
    assert "every 90 days" in ranked[0].sentence.text


def _linked(heading: str, path: str, text: str, via: tuple = ()) -> Passage:
    return Passage(1, "w", path, 0, len(text), 1, heading, 1.0, text, (), via)


def test_where_links_were_followed_from_the_page_a_question_names_a_passage_off_that_subject_loses(
        monkeypatch) -> None:
    """"The rotation of the owners of Egret's photo resizer": the Edge team's On-call is reached from Egret's
    page (it holds the link), the Storage team's says more of the question's words but neither says Egret
    nor is reached from a page that does."""
    from wikirag.passage import Hop

    egret = _linked("Project Egret > Dependencies", "projects/egret.md",
                    "Product photos are resized by [[edge|the Edge team's resizer]].")
    hop = Hop("w", "projects/egret.md", 1, "[[edge|the Edge team's resizer]]", "w", "teams/edge.md")
    edge = _linked("Edge team > On-call", "teams/edge.md", "A rotation of six, with the handover on Mondays.", (hop,))
    storage = _linked("Storage team > On-call", "teams/storage.md",
                      "The rotation of the owners hands over on Tuesdays, one week each.")
    question = "On which weekday does the rotation of the owners of Egret's photo resizer hand over?"
    passages = [storage, egret, edge]
    assert extract(question, passages, similarity=None)[1][-1].text.startswith("A rotation of six")
    monkeypatch.setattr("wikirag.extractive.W_UNANCHORED", 0.0)
    assert extract(question, passages, similarity=None)[1][0].text.startswith("The rotation of the owners")
    # a direct question: nothing was reached over links, so a passage need not repeat the question's names
    direct = "On which weekday does the rotation of Egret's owners hand over?"
    monkeypatch.setattr("wikirag.extractive.W_UNANCHORED", 10.0)
    assert extract(direct, [storage, egret], similarity=None)[1][0].text.startswith("The rotation of the owners")


def test_a_link_sentence_too_short_to_answer_still_bridges_a_chain() -> None:
    """"Owned by [[edge]]." is under MIN_CHARS, no answer by itself, but the sentence that leads to the team:
    the team's sentence is read after it (chained) and the hop is stated."""
    from wikirag.extractive import rank
    from wikirag.passage import Hop

    gateway = _linked("Jasper Gateway > On-call", "services/jasper.md", "Owned by [[edge]].")
    hop = Hop("w", "services/jasper.md", 1, "[[edge]]", "w", "teams/edge.md")
    people = _linked("Edge team > People", "teams/edge.md", "One engineer works remotely from Leeds.", (hop,))
    ranked = rank("Where does one engineer of the gateway's owners work?", [people, gateway], similarity=None)
    assert ranked[0].sentence.text.startswith("One engineer") and ranked[0].chained


def test_what_a_question_asks_for_and_which_kinds_tell_sections_apart() -> None:
    """extractive.asked_for: the graph layer chooses among a linked page's passages by it, but not by a time
    of day (most sections of an operations page have one)."""
    from wikirag.extractive import asked_for

    often = asked_for("How often does Garnet collect readings from each service?")
    assert any(h.search("The scrape interval is 30 seconds; do not ask for less.") for h in often)
    size = asked_for("What is the biggest single event the feed can deliver?", telling=True)
    assert size and size[0].search("256 KB maximum message size") and not size[0].search("Kept for 7 days.")
    when = "When does the backup of the Falcon database run?"
    assert asked_for(when) and asked_for(when, telling=False) and asked_for(when, telling=True) == []
    assert asked_for("What does the feed deliver?") == []
