"""An agent posttrain did not write, trained through ``posttrain serve``: it talks to the model
with the plain ``openai`` client, offers it a ``calculate`` tool, runs the calls the model
makes and sends the results back, until the model answers without a call (at most 4 turns).

    posttrain train configs/quickstart.yaml agent.external=examples/external_agent/agent.py:solve

posttrain calls ``solve(base_url, api_key, task)`` once per sample; the session's calls are
recorded token for token and become the episode. It returns None, so the run's reward
function scores the last reply (docs/serve.md).
"""

import ast
import json
import operator

import openai

TOOLS = [{"type": "function", "function": {
    "name": "calculate", "description": "Evaluate an arithmetic expression.",
    "parameters": {"type": "object", "properties": {"expression": {"type": "string"}},
                   "required": ["expression"]}}}]
OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul}


def calculate(expression: str) -> str:
    def value(node):
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in OPS:
            return OPS[type(node.op)](value(node.left), value(node.right))
        raise ValueError("only + - * of integers")
    try:
        return str(value(ast.parse(expression, mode="eval").body))
    except (SyntaxError, ValueError) as e:
        return f"error: {e}"


def solve(base_url: str, api_key: str, task) -> None:
    client = openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0)
    messages = list(task.messages())
    for _ in range(4):
        reply = client.chat.completions.create(model="policy", messages=messages,
                                               tools=TOOLS, max_tokens=64)
        message = reply.choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        if not message.tool_calls:
            return None
        for call in message.tool_calls:
            try:
                result = calculate(json.loads(call.function.arguments)["expression"])
            except (json.JSONDecodeError, KeyError, TypeError):
                result = "error: arguments must be {\"expression\": \"...\"}"
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    return None
