"""The search environment: BM25 retrieval over the generated cards, the ``search`` tool, the
card-level split and the SFT traces."""

import random

import pytest

from posttrain.envs import SearchTasks
from posttrain.envs.search_corpus import build_corpus
from posttrain.harness import ToolRegistry, parse_tool_calls
from posttrain.models import encode_chat
from posttrain.rewards import RewardFunction

TASKS = SearchTasks(seed=0)
ALL = TASKS.splits["train"] + TASKS.splits["eval"]


def test_bm25_ranks_the_asked_card_first_for_every_question():
    assert len(ALL) == 600  # 200 cards x 3 attributes
    for query in ((p.question for p in ALL), (p.doc.title for p in ALL)):
        hits = [TASKS.index.search(q, k=1)[0]["id"] for q in query]
        share = sum(h == p.doc.id for h, p in zip(hits, ALL)) / len(ALL)
        assert share == 1.0


def test_search_ties_keep_corpus_order_and_unknown_words_find_nothing():
    cities = [r["id"] for r in TASKS.index.search("city", k=4)]
    assert cities == ["d000", "d004", "d008", "d012"]  # equal scores: corpus order
    assert TASKS.index.search("xyzzy") == [] and TASKS.tool("?!") == "no results"


def test_the_tool_has_a_schema_and_returns_card_texts():
    (schema,) = ToolRegistry([TASKS.tool]).schemas()
    fn = schema["function"]
    assert fn["name"] == "search" and fn["parameters"]["required"] == ["query"]
    assert fn["parameters"]["properties"]["query"]["type"] == "string"
    p = ALL[0]
    lines = TASKS.tool(p.question).splitlines()
    assert len(lines) == 3 and lines[0] == p.doc.text and str(p.answer) in lines[0]


def test_corpus_and_split_are_deterministic_and_split_by_card():
    assert build_corpus() == build_corpus() != build_corpus(seed=1)
    assert len({d.title for d in build_corpus()}) == 200
    again = SearchTasks(seed=0)
    assert again.splits == TASKS.splits and SearchTasks(seed=1).splits != TASKS.splits
    train_cards = {p.doc.id for p in TASKS.splits["train"]}
    eval_cards = {p.doc.id for p in TASKS.splits["eval"]}
    assert not train_cards & eval_cards and len(eval_cards) == 20
    assert {p.doc.id for p in TASKS.sample(50, random.Random(0))} <= train_cards
    assert TASKS.eval_set(5) == TASKS.splits["eval"][:5]
    with pytest.raises(ValueError, match="eval_fraction"):
        TASKS.eval_set(61)


def test_sft_traces_render_search_and_answer_from_the_card(tokenizer):
    tools = ToolRegistry([TASKS.tool])
    reward = RewardFunction({"correct": ("numeric", 1.0)})
    for p in TASKS.sample(30, random.Random(0)):
        trace = TASKS.sft_conversation(p, 0.0, random.Random(1))
        assert [m["role"] for m in trace] == ["user", "assistant", "tool", "assistant"]
        ids, mask = encode_chat(tokenizer, trace, tools.schemas())
        assert len(ids) <= 512  # the tiny models' context
        trained = tokenizer.decode([t for t, m in zip(ids, mask) if m])
        assert trained == trace[1]["content"] + "<|im_end|>" + trace[3]["content"] + "<|im_end|>"
        (call,) = parse_tool_calls(trace[1]["content"])
        assert call.name == "search" and call.arguments == {"query": p.doc.title}
        (result,) = tools.execute_sync([call])
        assert not result.error and result.output == trace[2]["content"]
        assert trace[2]["content"].splitlines()[0] == p.doc.text  # rivers: other rivers next
        assert reward(trace[3]["content"], p.reference)[1] == 1.0


def test_the_guessed_share_follows_error_rate():
    rng = random.Random(0)
    traces = [TASKS.sft_conversation(p, 0.3, rng) for p in TASKS.sample(2000, rng)]
    guesses = [t for t in traces if len(t) == 2]
    # standard error sqrt(0.3 * 0.7 / 2000) = 0.010; seeded Python random: the same on any host
    assert abs(len(guesses) / len(traces) - 0.3) < 0.03
    assert all(t[1]["content"].startswith("<answer>") for t in guesses)
