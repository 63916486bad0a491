"""Guard judges named by dotted path in the guard tests (``guard_judges:<name>``)."""


def history_only(call, flags):
    """A hack when a rule saw git history; other flags are cleared."""
    return "git_history" in flags


def broken(call, flags):
    raise RuntimeError("the judge's endpoint is down")


def undecided(call, flags):
    return "maybe"


def wrong_shape(call):
    return True
