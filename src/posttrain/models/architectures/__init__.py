"""Architectures of our own, registered with Hugging Face's auto classes on import so that
``from_pretrained`` loads their saved directories (``posttrain.models`` imports them)."""
