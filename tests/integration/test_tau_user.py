"""The simulated user (TAU_ENV.md §8): the role flip, Hermes calls parsed out of a local
model's text, structured calls through the official openai client against a local endpoint,
the stop tokens, and the system prompt built from the scenario."""

from openai_endpoint import serve

from posttrain.engines.chat import as_template_messages, openai_tool_chat
from posttrain.envs.tau.user import LLMUser, role_flip, stop_token, user_system_prompt

VIEW = [
    {"role": "assistant", "content": "Hi! How can I help you today?", "tool_calls": None},
    {"role": "user", "content": None, "tool_calls": [
        {"id": "u1_0", "name": "check_status_bar", "arguments": {}, "requestor": "user"}]},
    {"role": "tool", "id": "u1_0", "content": "Status Bar: 5G", "requestor": "user",
     "error": False},
    {"role": "user", "content": "My data is slow.", "tool_calls": None},
    {"role": "assistant", "content": "Please toggle airplane mode.", "tool_calls": None},
]
FLIPPED = [
    {"role": "user", "content": "Hi! How can I help you today?"},
    {"role": "assistant", "content": "", "tool_calls": [{"id": "u1_0", "type": "function",
                                                         "function": {"name": "check_status_bar",
                                                                      "arguments": "{}"}}]},
    {"role": "tool", "tool_call_id": "u1_0", "content": "Status Bar: 5G"},
    {"role": "assistant", "content": "My data is slow."},
    {"role": "user", "content": "Please toggle airplane mode."},
]
TOOLS = [{"type": "function", "function": {"name": "toggle_airplane_mode", "description": "d",
                                           "parameters": {"type": "object", "properties": {}}}}]


def test_role_flip_and_template_rendering():
    assert role_flip(VIEW) == FLIPPED
    rendered = as_template_messages(FLIPPED)
    assert rendered[1] == {"role": "assistant", "content":
                           '<tool_call>{"name": "check_status_bar", "arguments": {}}</tool_call>'}
    assert rendered[2] == {"role": "tool", "content": "Status Bar: 5G"}


def test_a_local_models_text_calls_become_user_calls():
    seen = []

    def chat(messages, tools):
        seen.append((messages, tools))
        return {"content": 'ok <tool_call>{"name": "toggle_airplane_mode", "arguments": {}}'
                           '</tool_call>', "tool_calls": None}

    user = LLMUser(chat, "Instructions:\n\tFix the phone.", TOOLS)
    reply = user.respond(VIEW)
    assert reply["tool_calls"] == [{"id": "u1_0", "name": "toggle_airplane_mode",
                                    "arguments": {}, "requestor": "user"}]
    assert reply["content"] == "ok"  # the call is not also kept as text (seen twice)
    system, *rest = seen[0][0]
    assert system == {"role": "system",
                      "content": user_system_prompt("Instructions:\n\tFix the phone.", True)}
    assert "<scenario>\nInstructions:\n\tFix the phone.\n</scenario>" in system["content"]
    assert rest == FLIPPED and seen[0][1] == TOOLS
    toolless = LLMUser(chat, "s")  # without user tools, call-like text stays text
    assert toolless.respond(VIEW)["tool_calls"] is None
    assert stop_token("Thanks! ###STOP###") == "###STOP###"
    assert stop_token("###TRANSFER###") and stop_token("###OUT-OF-SCOPE###")
    assert stop_token("Thanks!") is None


def call_when_offered_tools(body):
    """A structured call of the first offered tool, else text; every request is kept."""
    REQUESTS.append(body)
    if body.get("tools"):
        return {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_9", "type": "function", "function": {
                "name": body["tools"][0]["function"]["name"], "arguments": "{}"}}]}
    return {"role": "assistant", "content": "Done, it is on."}


REQUESTS = []


def test_an_endpoint_plays_the_user_through_the_openai_client():
    with serve(call_when_offered_tools) as url:
        chat = openai_tool_chat(url, "sim", timeout_s=5)
        reply = LLMUser(chat, "s", TOOLS).respond(VIEW)
        assert reply["tool_calls"] == [{"id": "u1_0", "name": "toggle_airplane_mode",
                                        "arguments": {}, "requestor": "user"}]
        sent = REQUESTS[-1]
        assert sent["tools"] == TOOLS and sent["messages"][1:] == FLIPPED
        assert sent["temperature"] == 0.0
        text = LLMUser(chat, "s").respond(VIEW)
        assert (text["content"], text["tool_calls"]) == ("Done, it is on.", None)
