"""Environment classes named by ``task.env`` in the tests (``tests/integration/user_envs.py:X``)."""

import re

from posttrain.envs import StepResult


class Guess:
    """Guess the task's answer: each wrong guess is told "higher" or "lower" (a user turn),
    the right one ends the episode. Reward parts: ``solved`` and ``guesses``. A ``hint`` tool
    of its own tells the answer's parity."""

    made = []  # [reference, row, closed] of every instance, for the tests

    def __init__(self, task, row):
        self.target, self.row = int(task.reference), row
        self.tools = [self.hint]
        self.record = [task.reference, row, False]
        Guess.made.append(self.record)

    def hint(self) -> str:
        """Whether the answer is even or odd."""
        return "even" if self.target % 2 == 0 else "odd"

    def reset(self, task):
        return [*task.messages(), {"role": "system", "content": "Guess; I say higher or lower."}]

    def step(self, action):
        found = re.findall(r"-?\d+", action)
        guess = int(found[-1]) if found else None
        if guess == self.target:
            return StepResult(None, {"solved": 1.0, "guesses": 1.0}, 1.0, True, {"last": guess})
        told = "higher" if guess is None or guess < self.target else "lower"
        return StepResult([{"role": "user", "content": told}], {"guesses": 1.0}, 0.0, False)

    def close(self):
        self.record[2] = True


class Silent:
    """Ends the episode at the first answer without reporting any reward part."""

    def __init__(self, task):
        pass

    def reset(self, task):
        return task.messages()

    def step(self, action):
        return StepResult(None, {}, 0.0, True)


class NoStep:
    def __init__(self, task):
        pass

    def reset(self, task):
        return task.messages()


class TwoTasks:
    def __init__(self, task, other):
        pass

    def reset(self, task):
        return []

    def step(self, action):
        return None


class BadReset:
    def __init__(self, task):
        pass

    def reset(self, task):
        return "What is 2+3?"

    def step(self, action):
        return StepResult(None, {}, 0.0, True)
