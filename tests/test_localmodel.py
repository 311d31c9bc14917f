"""The bundled local model through a real HTTP server and LiteLLM: cited answers, streaming, limits."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from wikirag import Workspace, build, localmodel
from wikirag.answers import answer
from wikirag.cli import cli
from wikirag.errors import LocalModelError

from .conftest import make_wiki


def test_a_local_answer_cites_a_passage_with_exact_offsets(built: Workspace, home: Path, local_model) -> None:
    stream = answer(built, "team", "How often should I water tomatoes?", clearance="internal", model="local", k=1)
    chunks = list(stream)
    result = stream.result
    assert result.error is None, result.error
    assert len(chunks) > 1 and "".join(chunks) == result.text  # streamed, not sent in one piece
    assert result.citations, result.text
    for c in result.citations:
        passage = result.passages[c.n - 1]
        source = (home / "wikis" / c.wiki / c.path).read_bytes().decode("utf-8")
        assert source[c.start:c.end] == passage.text
    assert result.prompt_tokens > 0 and result.completion_tokens > 0
    assert 0 < result.first_token_seconds <= result.generation_seconds


def test_a_prompt_too_long_for_the_model_is_retried_with_fewer_passages(home: Path, local_model) -> None:
    # 30 passages do not fit the model's context; the 15 best are short pages, so the retry with half of them
    # fits, and generates from a short prompt (when every page was long, the prompt that fitted took ~50 s)
    filler = " ".join(f"Rye loaf note {i} about oven heat, crust colour and baking times." for i in range(50))
    short = {f"s{i}.md": f"# Feeding {i}\n\nFeed a sourdough starter flour and water every day ({i}).\n"
             for i in range(15)}
    long = {f"p{i}.md": f"# Page {i}\n\nA sourdough starter is used. {filler}\n" for i in range(15)}
    make_wiki(home, "bread", {**short, **long})
    ws = Workspace(home, recheck_seconds=0)
    build(ws.wiki("bread"))
    (home / "rags" / "bread.yaml").write_text("sensitivity: public\nwikis: [bread]\n")
    result = answer(ws, "bread", "How often to feed a sourdough starter?", clearance="public", model="local",
                    k=30).result
    assert result.error is None, result.error
    assert any("retried with" in w for w in result.warnings)
    assert 1 <= len(result.passages) < 30


def test_serve_model_status_and_ask_cli(built: Workspace, home: Path, local_model) -> None:
    runner = CliRunner()
    status = runner.invoke(cli, ["serve-model", "--status"])
    assert status.exit_code == 0 and f"pid {local_model.pid}" in status.stdout
    asked = runner.invoke(cli, ["--home", str(home), "ask", "open", "How often should I water tomatoes?",
                                "--model", "local", "-k", "1"])
    assert asked.exit_code == 0, asked.output
    assert "Sources:" in asked.stdout and "*[1] alpha/tomatoes.md" in asked.stdout
    assert localmodel.running() == local_model


def test_a_repeated_sentence_is_left_out_of_the_stream() -> None:
    # SmolLM2 on the V60 question: "The ideal temperature … is 94–96 °C. [1] … [2] … [3] … [4]"
    chunks = ["The ideal temperature for a V60 ", "is 94–96 °C. [1] The ideal", " temperature for a v60 is 94–96 °C.",
              " [2] Use a medium-fine grind. [3] The ideal temperature for a V60 is 94–96 °C. [4]"]
    out = list(localmodel.drop_repeats(iter(chunks)))
    assert "".join(out) == "The ideal temperature for a V60 is 94–96 °C. [1] Use a medium-fine grind. [3]"
    assert out[0] == "The ideal temperature for a V60 "  # a new sentence streams as it comes
    assert not any("ideal" in part for part in out[2:])  # a repeat is held back, never shown
    assert "".join(localmodel.drop_repeats(iter(["No citation here."]))) == "No citation here."


def test_the_local_model_is_chosen_by_name_or_gguf_path(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv(localmodel.MODEL_ENV, raising=False)
    assert localmodel.model_name() == "smollm2" and localmodel.gguf_path().name == "SmolLM2-135M-Instruct.Q4_1.gguf"
    monkeypatch.setenv(localmodel.MODEL_ENV, str(localmodel.gguf_path()))
    assert localmodel.gguf_path().is_file()
    assert localmodel.alias(localmodel.model_name()) == "SmolLM2-135M-Instruct.Q4_1"
    monkeypatch.setenv(localmodel.MODEL_ENV, "llama-70b")
    with pytest.raises(LocalModelError, match=r"unknown local model 'llama-70b': use one of smollm2, gemma3-270m"):
        localmodel.gguf_path()
    (tmp_path / "notes.txt").write_text("not a model")
    with pytest.raises(LocalModelError, match="or the path of a .gguf file"):
        localmodel.gguf_path(str(tmp_path / "notes.txt"))
