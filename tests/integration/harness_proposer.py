"""A scripted harness proposer for the harness-search tests: after the starting harness it
proposes a bank with a carry skill (when the store's failed traces show wrong sums), a bank
whose skill does not mention carrying, and a harness whose config does not load."""

from posttrain.harness_search import Candidate, digest

SKILL = """---
name: column-addition
description: Add numbers column by column.
triggers: [addition, '+']
version: 0.1.0
---
Add each column from the right and carry the ten into the next column.
"""
VAGUE = SKILL.replace("and carry the ten into the next column", "and write its digit")
CALLS = []


def propose(store, k, iteration):
    CALLS.append(iteration)
    seen = digest(store)
    out = []
    if "failed episodes of i00-0" in seen and "<answer>" in seen:
        out.append(Candidate("", {"skills.dir": "{candidate}/skills"},
                             {"skills/column-addition/SKILL.md": SKILL}, "i00-0",
                             "a carry skill"))
    out += [Candidate("", {"skills.dir": "{candidate}/skills"},
                      {"skills/column-addition/SKILL.md": VAGUE}, "i00-0", "a vague skill"),
            Candidate("", {"task.bogus": 1}, {}, "i00-0", "a key that does not exist")]
    return out[:k]
