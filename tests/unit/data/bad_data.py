"""Prompt files for the bad-data tests of the in-memory and streamed dataset tasks."""

import json

BAD_ROWS = [{"question": "", "answer": 0}, {"question": " ", "answer": 1}]


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def write_bad_case(path, case: str, good_rows) -> str:
    """Write the file of ``case`` to ``path``; returns the split to ask for."""
    if case == "missing column":
        write_jsonl(path, [{"text": "x", "answer": 1}])
    elif case == "no usable row":
        write_jsonl(path, BAD_ROWS)
    elif case == "not json":
        path.write_text('{"question": "a", "answer": 1}\nnot json\n')
    elif case == "no rows":
        path.write_text("")
    else:  # unknown split
        write_jsonl(path, good_rows)
        return "test"
    return "train"
