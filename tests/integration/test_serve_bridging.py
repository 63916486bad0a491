"""Sessions bridge whatever the model sampled: a lone byte of a character (the client sees
U+FFFD) or a special token (dropped from the visible text) keeps its tokens when the client
sends the reply back, a server-held ``previous_response_id`` chain always bridges, and an
Anthropic prefill is recorded as one assistant message that replays."""

import anthropic
import openai
import pytest
from serve_helpers import Scripted, served

from posttrain.harness import episode_problems

USER = [{"role": "user", "content": "Say something."}]


@pytest.fixture
def replies(tokenizer):
    """Two replies the plain text of which encodes to other tokens than were sampled."""
    def ids(text):
        return tokenizer.encode(text, add_special_tokens=False)
    lone_byte = ids("Caf") + [tokenizer.convert_tokens_to_ids("Ã")]  # é's first byte alone
    special = [tokenizer.convert_tokens_to_ids("<|im_start|>"), *ids("Hi")]
    return lone_byte, special


def one_segment(sessions, key, tokenizer):
    episode = sessions.episode(key)
    assert episode_problems(episode, tokenizer) == []
    return len(episode.segments), episode.meta["splits"]


@pytest.mark.parametrize("which", [0, 1], ids=["lone-byte", "special-token"])
def test_a_reply_whose_text_encodes_otherwise_still_bridges(tokenizer, replies, which):
    with served(Scripted(tokenizer, [replies[which], "Fine."]), tokenizer) as (url, sessions):
        client = openai.OpenAI(base_url=url, api_key="k", max_retries=0)
        first = client.chat.completions.create(model="tiny", messages=USER)
        text = first.choices[0].message.content
        assert text in ("Caf\ufffd", "Hi")  # what the client sees
        client.chat.completions.create(model="tiny", messages=[
            *USER, {"role": "assistant", "content": text}, {"role": "user", "content": "More."}])
        assert one_segment(sessions, "k", tokenizer) == (1, [])


def test_a_server_held_response_chain_always_bridges(tokenizer, replies):
    with served(Scripted(tokenizer, [replies[0], replies[1], "Fine."]), tokenizer) as (
            url, sessions):
        client = openai.OpenAI(base_url=url, api_key="k", max_retries=0)
        previous = None
        for turn in range(3):
            previous = client.responses.create(model="tiny", input=f"Turn {turn}.",
                                               previous_response_id=previous).id
        assert one_segment(sessions, "k", tokenizer) == (1, [])


def test_a_prefill_is_one_assistant_message_that_replays_and_bridges(tokenizer):
    with served(Scripted(tokenizer, [" 5.", "Yes."]), tokenizer) as (url, sessions):
        client = anthropic.Anthropic(base_url=url.removesuffix("/v1"), api_key="k",
                                     max_retries=0)
        messages = [{"role": "user", "content": "What is 2+3?"},
                    {"role": "assistant", "content": "The answer is"}]
        reply = client.messages.create(model="tiny", max_tokens=8, messages=messages)
        assert reply.content[0].text == " 5."
        episode = sessions.episode("k")
        assert episode.meta["segment_messages"][0][-1] == {
            "role": "assistant", "content": "The answer is 5."}
        messages = [messages[0], {"role": "assistant", "content": "The answer is 5."},
                    {"role": "user", "content": "Sure?"}]
        client.messages.create(model="tiny", max_tokens=8, messages=messages)
        assert one_segment(sessions, "k", tokenizer) == (1, [])


def test_a_dropped_reply_keeps_what_came_before_it_token_exact(tokenizer, replies):
    """The client drops the second reply (it hung up, or retries the turn): the new call
    reuses the recorded tokens through the first reply, lone byte included, and the split is
    where the conversation changed (it was inside reply #1: its text re-encoded)."""
    with served(Scripted(tokenizer, [replies[0], "Two.", "Three."]), tokenizer) as (
            url, sessions):
        client = openai.OpenAI(base_url=url, api_key="k", max_retries=0)
        first = client.chat.completions.create(model="tiny", messages=USER)
        kept = [*USER, {"role": "assistant", "content": first.choices[0].message.content},
                {"role": "user", "content": "More."}]
        client.chat.completions.create(model="tiny", messages=kept)  # its reply is dropped
        client.chat.completions.create(model="tiny", messages=[
            *kept[:2], {"role": "user", "content": "More, please."}])
        episode = sessions.episode("k")
        assert episode_problems(episode, tokenizer) == []
        old, new = episode.segments
        through_first = old.loss_mask.index(0, old.loss_mask.index(1))  # after reply #1
        assert new.token_ids[:through_first] == old.token_ids[:through_first]
        (split,) = episode.meta["splits"]
        assert split["call"] == 3 and split["position"] > through_first
