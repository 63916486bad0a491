"""What the serve tests share: a scripted model and a server around it."""

import contextlib
from collections.abc import Iterator

from posttrain.engines.base import GenerationOutput
from posttrain.serve import Completer, Sessions, create_app, running


class Scripted:
    """An engine that samples the given texts, one per generated row in turn (as their
    canonical tokens, or the token ids given instead of a text; then eos), each token at
    log-prob -0.5: lets a test know what the model says. The server is what is tested; this
    stands in for the model."""

    def __init__(self, tokenizer, texts):
        self.tokenizer, self.texts, self.version = tokenizer, list(texts), 7

    def generate(self, prompts, sampling, seeds=None):
        outs = []
        for p in prompts:
            said = self.texts.pop(0)
            ids = list(said) if isinstance(said, list) else \
                self.tokenizer.encode(said, add_special_tokens=False)
            ids.append(self.tokenizer.eos_token_id)
            outs.append(GenerationOutput(list(p), ids, [-0.5] * len(ids), "stop", 7))
        return outs


@contextlib.contextmanager
def served(engine, tokenizer, name: str = "tiny", **options) -> Iterator[tuple[str, Sessions]]:
    """``(base_url, sessions)`` of a running server on ``engine`` (``options``: the
    ``Completer``'s)."""
    sessions = Sessions()
    completer = Completer(engine, tokenizer, 512, options.pop("max_tokens", 16), **options)
    with running(create_app(completer, sessions, name)) as url:
        yield url, sessions
