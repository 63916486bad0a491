"""``posttrain template check`` and what it predicts: the tiny model's template bridges every
construct but a client's JSON round trip; a Qwen3-style template that strips earlier
reasoning breaks the reasoning construct, and ``posttrain serve`` then records a split."""

import shutil

import openai
import pytest
from serve_helpers import Scripted, served
from typer.testing import CliRunner

from posttrain.cli.app import app
from posttrain.models import load_tokenizer

STRIP = "{{ message['content'].split('</think>')[-1] }}"


@pytest.fixture
def stripping_dir(tmp_path, tiny_dir):
    """The tiny tokenizer with a template that drops an assistant turn's reasoning."""
    tokenizer = load_tokenizer(tiny_dir)
    assert "{{ message['content'] }}" in tokenizer.chat_template
    tokenizer.chat_template = tokenizer.chat_template.replace("{{ message['content'] }}", STRIP)
    shutil.copytree(tiny_dir, tmp_path / "stripping")
    tokenizer.save_pretrained(tmp_path / "stripping")
    return tmp_path / "stripping"


def verdicts(model_dir):
    """The exit code and each construct's verdict; a row rich wrapped continues on lines whose
    first cell is empty (a narrow console: pytest-xdist's workers fix COLUMNS at 80)."""
    result = CliRunner().invoke(app, ["template", "check", str(model_dir)])
    cells = [[c.strip() for c in line.split("│")[1:3]]
             for line in result.output.splitlines() if line.startswith("│")]
    return result.exit_code, {construct: bridges for construct, bridges in cells if construct}


def test_the_tiny_template_bridges_all_but_a_json_round_trip(tiny_dir):
    code, rows = verdicts(tiny_dir)
    assert code == 1
    assert rows == {"plain turns": "yes", "system prompt": "yes",
                    "tool call and result": "yes", "reasoning block": "yes",
                    "JSON booleans and numbers": "no"}


def test_a_template_that_strips_reasoning_breaks_it_and_serve_splits_there(stripping_dir):
    code, rows = verdicts(stripping_dir)
    assert code == 1 and rows["reasoning block"] == "no" and rows["plain turns"] == "yes"
    tokenizer = load_tokenizer(stripping_dir)
    engine = Scripted(tokenizer, ["<think>2 plus 3.</think>It is 5.", "6."])
    with served(engine, tokenizer, "t") as (url, sessions):
        client = openai.OpenAI(base_url=url, api_key="k", max_retries=0)
        messages = [{"role": "user", "content": "What is 2+3?"}]
        reply = client.chat.completions.create(model="t", messages=messages)
        messages += [{"role": "assistant", "content": reply.choices[0].message.content},
                     {"role": "user", "content": "And 3+3?"}]
        client.chat.completions.create(model="t", messages=messages)
    episode = sessions.episode("k")
    assert len(episode.segments) == 2 and len(episode.meta["splits"]) == 1
