"""Tool-call parsing (Hermes format, malformed input) and deterministic output truncation."""

from posttrain.harness import format_tool_call, parse_tool_calls, truncate_output


def test_parses_parallel_calls_in_order():
    text = ('I will add.<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}</tool_call>'
            '<tool_call>\n{"name": "neg", "arguments": "{\\"x\\": 3}"}\n</tool_call>')
    calls = parse_tool_calls(text)
    assert [(c.name, c.arguments, c.call_id, c.error) for c in calls] == [
        ("add", {"a": 1, "b": 2}, "call_0", None), ("neg", {"x": 3}, "call_1", None)]


def test_malformed_calls_become_errors_not_exceptions():
    calls = parse_tool_calls('<tool_call>{"name": "add", "arguments": {"a": 1</tool_call>'
                             '<tool_call>[1, 2]</tool_call>'
                             '<tool_call>{"name": "f", "arguments": 5}</tool_call>')
    assert [c.error is not None for c in calls] == [True, True, True]
    assert "malformed tool call JSON" in calls[0].error
    assert "string 'name'" in calls[1].error and "JSON object" in calls[2].error
    assert parse_tool_calls("no calls here") == [] and parse_tool_calls(None) == []


def test_formatted_calls_parse_back():
    text = format_tool_call("refund", {"order_id": "#W1", "items": ["a", "b"]})
    assert text == ('<tool_call>{"name": "refund", "arguments": {"order_id": "#W1", '
                    '"items": ["a", "b"]}}</tool_call>')
    (call,) = parse_tool_calls("Sure. " + text)
    assert (call.name, call.arguments, call.error) == (
        "refund", {"order_id": "#W1", "items": ["a", "b"]}, None)


def test_custom_pattern():
    calls = parse_tool_calls('CALL[{"name": "x"}]', pattern=r"CALL\[(.*?)\]")
    assert calls[0].name == "x" and calls[0].arguments == {}


def test_truncation_by_lines_keeps_head_and_tail():
    text = "".join(f"line {i}\n" for i in range(300))
    out = truncate_output(text, max_lines=256)
    lines = out.splitlines()
    assert lines[0] == "line 0" and lines[127] == "line 127"
    assert lines[128] == "[... omitted 44 of 300 lines ...]"
    assert lines[129] == "line 172" and lines[-1] == "line 299"
    assert truncate_output(text, max_lines=256) == out  # deterministic
    assert truncate_output("short\n") == "short\n"


def test_truncation_by_bytes_respects_utf8_boundaries():
    text = "é" * 10_000  # 2 bytes each
    out = truncate_output(text, max_lines=10**6, max_bytes=1001)
    head, marker, tail = out.split("\n")
    assert set(head) == {"é"} and set(tail) == {"é"}
    assert len(head.encode()) <= 500 and len(tail.encode()) <= 501
    omitted = 20_000 - len(head.encode()) - len(tail.encode())
    assert marker == f"[... omitted {omitted} of 20000 bytes ...]"
