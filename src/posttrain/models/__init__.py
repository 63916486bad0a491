"""Models and tokenizers from local directories (and value models for a critic), the
tiny-model factory, GGUF files imported as model directories (``converters``), chat rendering
with loss masks, chunked log-probs, shared-prefix and packed forwards, LoRA through peft, text
embeddings pooled from the final hidden states and P-GenRM's user prototypes."""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
