"""``posttrain serve``: OpenAI- and Anthropic-compatible endpoints in front of an engine
that record every session's calls token for token, so external agents can be trained
(docs/serve.md)."""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
