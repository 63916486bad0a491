"""Quick instructions (``model.quick_tokens``; docs/quick_instructions.md): ``<action>``,
``<query>``, ``<domain>``, ... answered from the prompt's KV cache. Their rows for the built-in
tasks (``posttrain quick-data``: ``data``) and their evaluation (``posttrain eval --mode
quick``: ``evaluation``) live here; what lower layers need of them stays with those layers:
the tokens (``models.quick_tokens``), a dataset row's quick answers (``data.chat_formats``),
the engine's answering (``engines.quick``) and ``posttrain serve``'s ``quick`` field."""

from posttrain.hooks import Feature

FEATURE = Feature("quick", order=95, package=__name__)
