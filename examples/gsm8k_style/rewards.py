"""A reward function of one's own, named in configs/gsm8k_style.yaml by dotted path: a small
bonus for showing the column work right, read from the completion and the dataset's
``carries`` column (a column that receives a carry is written ``x+y+1=...``)."""

import re

CARRIED_COLUMN = re.compile(r"\d\+\d\+1=")


def shows_work(completion: str, carries: int) -> float:
    """1 for a ``<think>`` block with as many carried columns as the sum has; 0 otherwise."""
    if "<think>" not in completion or "</think>" not in completion:
        return 0.0
    work = completion.split("<think>", 1)[1].split("</think>", 1)[0]
    return float(len(CARRIED_COLUMN.findall(work)) == carries)
