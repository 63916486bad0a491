"""Errors about the data model that several layers raise."""


class ChatTemplateError(ValueError):
    """The tokenizer has no chat template, or its template cannot be rendered incrementally (a
    later rendering does not extend an earlier one), so tokens cannot be appended without
    re-tokenising."""


class TeacherMismatchError(ValueError):
    """A teacher cannot score the student's data: another vocabulary, stored logits written
    for other data, or no teacher serving a sample's domain and effort."""


class WeightSyncError(RuntimeError):
    """A weight sync hung, delivered other weights than sent, or left the engine scoring
    differently from the trainer."""


class MismatchError(RuntimeError):
    """Engine and trainer log-probs of the same tokens disagree beyond tolerance."""


class DataError(ValueError):
    """A data file a run reads holds no valid row, or a file it needs does not parse (a
    skill's ``SKILL.md``)."""
