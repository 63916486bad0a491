"""Errors about the data model that several layers raise."""


class ChatTemplateError(ValueError):
    """The tokenizer's chat template cannot be rendered incrementally (a later rendering does
    not extend an earlier one), so tokens cannot be appended without re-tokenising."""
