"""Data for a personalised judge on the quickstart's arithmetic (docs/reward_models.md, "P-GenRM"):
two users who want different answers, evaluation chains that say so, and SFT conversations
answered in both styles.

    python examples/pgenrm/personas.py runs/pgenrm_data

writes ``judge.jsonl`` (the ``pgenrm`` judge's prompt for a user, a question and an answer,
then the gold chain) and ``policy.jsonl`` (arithmetic answered with or without the working, at
random). The brief user wants the number alone, the teacher wants the working. A chain scores
correctness (weight 0.7: 10 right, 0 wrong) and style (weight 0.3: 10 as the user wants it,
else 3), and its final score is their weighted sum.

    python examples/pgenrm/personas.py --evaluate runs/pgenrm_judge/sft_model

measures a trained judge on held-out problems (``evaluate``), ``--styles <model>`` a
policy's answers (``styles``). ``--pairs OUT.jsonl HARD [HARD_END ROWS]`` writes preference pairs
for the GRPO stage and the curriculum (``write_pairs``, ``pairs.py``), and ``--users
OUT.jsonl`` pairs that name their user for the prototype module (``write_user_pairs``,
``prototypes.yaml``)."""

from __future__ import annotations

import json
import random
import re
import statistics
import sys
from pathlib import Path

from posttrain.config import load_config
from posttrain.recipes.run_tasks import RunTasks
from posttrain.rewards.evaluation_chain import chain_messages

PERSONAS = {
    "brief": ("A busy accountant who wants only the final number.", "the answer alone",
              False),
    "teacher": ("A maths teacher who wants the working shown.", "every step shown", True),
}
WEIGHTS = {"correctness": 0.7, "style": 0.3}
THINK = re.compile(r"<think>.*?</think>", re.DOTALL)


def styled(answer: str, worked: bool) -> str:
    """The quickstart answer with its working (``<think>``) kept or dropped."""
    return answer if worked else THINK.sub("", answer)


def gold_chain(persona: str, correct: bool, worked: bool) -> str:
    """The chain a judge should write for ``persona``'s user on an answer."""
    profile, preference, wants_working = PERSONAS[persona]
    scores = {"correctness": 10 if correct else 0, "style": 10 if worked == wants_working else 3}
    final = sum(WEIGHTS[c] * s for c, s in scores.items())
    lines = [f"Persona: {profile}", f"Core preference: {preference}",
             *(f"Criterion: {c} | weight {WEIGHTS[c]:g} | score {s}" for c, s in scores.items()),
             f"Final score: {final:.1f}"]
    return "\n".join(lines)


def answers(n: int, error_rate: float, seed: int, held_out: bool = False):
    """``n`` (question, answer with working, right) from the quickstart's train split (or
    its held-out problems)."""
    run = RunTasks(load_config("configs/quickstart.yaml", [f"seed={seed}"]))
    rng = random.Random(seed)
    tasks = run.eval_tasks[:n] if held_out else run.tasks.sample(n, rng)
    for task in tasks:
        conversation = run.tasks.sft_conversation(task, error_rate, rng)
        answer = conversation[-1]["content"]
        found = re.search(r"<answer>(.*?)</answer>", answer)
        yield task.messages()[-1]["content"], answer, bool(found) and \
            found.group(1).strip() == task.reference


def write(out: Path, n_judge: int = 4000, n_policy: int = 8000, seed: int = 0) -> None:
    """``judge.jsonl`` and ``policy.jsonl`` in ``out`` (module docstring)."""
    out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(f"personas:{seed}")
    with open(out / "judge.jsonl", "w") as f:
        for question, answer, right in answers(n_judge, 0.5, seed):
            persona, worked = rng.choice(sorted(PERSONAS)), rng.random() < 0.5
            prompt = chain_messages(question, styled(answer, worked), PERSONAS[persona][0])
            chain = gold_chain(persona, right, worked)
            f.write(json.dumps({"messages": [*prompt, {"role": "assistant",
                                                        "content": chain}]}) + "\n")
    with open(out / "policy.jsonl", "w") as f:
        for question, answer, _ in answers(n_policy, 0.3, seed + 1):
            f.write(json.dumps({"messages": [
                {"role": "user", "content": question},
                {"role": "assistant", "content": styled(answer, rng.random() < 0.5)}]}) + "\n")


def write_pairs(path: Path, n: int = 2000, hard: float = 0.5, hard_end: float | None = None,
                seed: int = 2) -> None:
    """Preference pairs for ``pairs.py``'s GRPO stage, one user each: a share ``hard`` are hard
    negatives (a right answer over a wrong one, both in the user's style), the others differ
    in style only (the same right answer). With ``hard_end`` the share grows linearly from
    ``hard`` at the first row to ``hard_end`` at the last (the curriculum, read in file
    order)."""
    run = RunTasks(load_config("configs/quickstart.yaml", [f"seed={seed}"]))
    rng = random.Random(f"pairs:{seed}")
    end = hard if hard_end is None else hard_end
    with open(path, "w") as f:
        for i, task in enumerate(run.tasks.sample(n, rng)):
            right = run.tasks.sft_conversation(task, 0.0, rng)[-1]["content"]
            wrong = run.tasks.sft_conversation(task, 1.0, rng)[-1]["content"]
            persona = rng.choice(sorted(PERSONAS))
            profile, preference, wants_working = PERSONAS[persona]
            share = hard + (end - hard) * i / max(1, n - 1)
            is_hard = rng.random() < share and wrong != right
            chosen, rejected = ((styled(right, wants_working), styled(wrong, wants_working))
                                if is_hard else
                                (styled(right, wants_working), styled(right, not wants_working)))
            question = task.messages()[-1]["content"]
            f.write(json.dumps({"prompt": chain_messages(question, chosen, profile),
                                "rejected_prompt": chain_messages(question, rejected, profile),
                                "preference": preference, "hard": is_hard}) + "\n")


def write_user_pairs(path: Path, n_users: int = 40, per_user: int = 30, seed: int = 3) -> None:
    """Pairs that name their user, for the prototype module (``prototypes.yaml``): each of
    ``n_users`` users (``brief_07``, ``teacher_12``: a persona at random) judges
    ``per_user`` answers, half a right answer over a wrong one in their style, half the same
    right answer in their style over the other; rows in random order."""
    run = RunTasks(load_config("configs/quickstart.yaml", [f"seed={seed}"]))
    rng = random.Random(f"users:{seed}")
    users = [f"{rng.choice(sorted(PERSONAS))}_{j:02d}" for j in range(n_users)]
    rows = []
    for task in run.tasks.sample(n_users * per_user, rng):
        user = users[len(rows) // per_user]
        wants_working = PERSONAS[user.split("_")[0]][2]
        right = run.tasks.sft_conversation(task, 0.0, rng)[-1]["content"]
        wrong = run.tasks.sft_conversation(task, 1.0, rng)[-1]["content"]
        rejected = styled(wrong, wants_working) if len(rows) % 2 and wrong != right \
            else styled(right, not wants_working)
        rows.append({"prompt": task.messages()[-1]["content"], "user": user,
                     "chosen": styled(right, wants_working), "rejected": rejected})
    rng.shuffle(rows)
    with open(path, "w") as f:
        f.writelines(json.dumps(row) + "\n" for row in rows)


def evaluate(judge_dir: str, n: int = 100) -> dict[str, float]:
    """The judge in ``judge_dir`` on ``n`` held-out problems, for each user, greedy: the share
    of chains that parse, the mean |score - gold| on [0, 1], the share of each criterion's
    scores equal to the gold chain's (``<name>_criterion``), and how often it ranks the answer
    in the user's style above the same answer in the other (``style_pairs``) and a right
    answer above a wrong one in the same style (``correct_pairs``; ties count half)."""
    from posttrain.config.served import ServedModel
    from posttrain.recipes.judges.chats import ServedChats
    from posttrain.rewards.evaluation_chain import extract

    chat = ServedChats("float32", 0).chat(ServedModel(model=judge_dir, max_new_tokens=160))
    items = [(q, a, r) for q, a, r in answers(n, 0.5, 0, held_out=True)]
    asks, golds = [], []
    for q, a, right in items:
        for persona, (profile, _, _) in sorted(PERSONAS.items()):
            for worked in (True, False):
                asks.append(chain_messages(q, styled(a, worked), profile))
                golds.append(float(gold_chain(persona, right, worked).rsplit(" ", 1)[1]) / 10)
    replies = chat(asks)
    scores = [extract(reply) for reply in replies]
    parsed = [(s, g) for s, g in zip(scores, golds) if s is not None]
    criteria = {c: [] for c in WEIGHTS}  # does each criterion's score match the gold chain's?
    for reply, (q, a, right), slot in zip(replies, [i for i in items for _ in range(4)],
                                          [k % 4 for k in range(len(replies))]):
        persona, worked = sorted(PERSONAS)[slot // 2], slot % 2 == 0
        gold = gold_chain(persona, right, worked)
        for c in WEIGHTS:
            pattern = rf"Criterion: {c} \| weight [\d.]+ \| score (\d+)"
            said, want = re.search(pattern, reply), re.search(pattern, gold)
            criteria[c].append(float(bool(said) and said.group(1) == want.group(1)))

    def ranked(better, worse):
        return 1.0 if better > worse else 0.5 if better == worse else 0.0

    style, correct = [], []
    by_item = [scores[k:k + 4] for k in range(0, len(scores), 4)]  # teacher/brief x worked
    for (_, _, right), (b_w, b_s, t_w, t_s) in zip(items, by_item):
        if None not in (b_w, b_s, t_w, t_s):
            style += [ranked(b_s, b_w), ranked(t_w, t_s)]
    rights = [k for k, (_, _, r) in enumerate(items) if r]
    wrongs = [k for k, (_, _, r) in enumerate(items) if not r]
    for i, j in zip(rights, wrongs):  # same persona and style, a right and a wrong answer
        for slot in range(4):
            if by_item[i][slot] is not None and by_item[j][slot] is not None:
                correct.append(ranked(by_item[i][slot], by_item[j][slot]))
    def mean(xs: list[float]) -> float:
        return statistics.fmean(xs) if xs else float("nan")

    return {"parsed": len(parsed) / len(scores),
            "abs_error": mean([abs(s - g) for s, g in parsed]),
            **{f"{c}_criterion": mean(v) for c, v in criteria.items()},
            "style_pairs": mean(style), "correct_pairs": mean(correct)}


def styles(policy_dir: str, n: int = 200) -> dict[str, float]:
    """A policy's greedy answers to ``n`` held-out problems: the share that show the working
    and the share that are right."""
    from posttrain.config.served import ServedModel
    from posttrain.recipes.judges.chats import ServedChats

    run = RunTasks(load_config("configs/quickstart.yaml"))
    tasks = run.eval_tasks[:n]
    chat = ServedChats("float32", 0).chat(ServedModel(model=policy_dir, max_new_tokens=32))
    replies = chat([t.messages() for t in tasks])
    right = [re.search(rf"<answer>\s*{re.escape(t.reference)}\s*</answer>", r) is not None
             for t, r in zip(tasks, replies)]
    return {"worked": statistics.fmean("<think>" in r for r in replies),
            "accuracy": statistics.fmean(right)}


if __name__ == "__main__":
    if sys.argv[1:2] == ["--evaluate"]:
        print(json.dumps(evaluate(sys.argv[2]), indent=1))
    elif sys.argv[1:2] == ["--styles"]:
        print(json.dumps(styles(sys.argv[2]), indent=1))
    elif sys.argv[1:2] == ["--pairs"]:  # --pairs OUT.jsonl HARD [HARD_AT_END ROWS]
        write_pairs(Path(sys.argv[2]), hard=float(sys.argv[3]),
                    hard_end=float(sys.argv[4]) if len(sys.argv) > 4 else None,
                    n=int(sys.argv[5]) if len(sys.argv) > 5 else 2000)
    elif sys.argv[1:2] == ["--users"]:  # --users OUT.jsonl
        write_user_pairs(Path(sys.argv[2]))
    else:
        write(Path(sys.argv[1] if len(sys.argv) > 1 else "runs/pgenrm_data"))
