"""Extensions the CURIO tests name by dotted path."""

from posttrain.envs import StepResult


class Moody:
    """A ``task.env`` whose user is calm or angry (by the task's parity) and says so on the
    second turn; the first reply tells nothing."""

    user_types = ("calm", "angry")

    def __init__(self, task):
        self.true_type = "calm" if int(task.reference) % 2 == 0 else "angry"
        self.turns = 0

    def reset(self, task):
        return [{"role": "user", "content": "Talk to me."}]

    def step(self, action):
        self.turns += 1
        if self.turns == 3:
            return StepResult(None, {"solved": 1.0}, done=True)
        said = "fine" if self.turns == 1 else self.true_type
        return StepResult([{"role": "user", "content": said}], {"solved": 0.0}, done=False)


def mood_classifier(messages, user_types):
    """Sure once the user names a type; unsure before."""
    last = messages[-1]["content"]
    return [0.9 if t == last else 0.1 for t in user_types] if last in user_types else [1, 1]


def mood_likelihood(messages, reply, user_type):
    """A calm user says so more often than an angry one."""
    return 0.8 if reply == user_type else 0.2


def bad_classifier(messages, user_types):
    return [1.0]


class Typeless(Moody):
    user_types = None

    def __init__(self, task):
        super().__init__(task)
        del self.true_type
