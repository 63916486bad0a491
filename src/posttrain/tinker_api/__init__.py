"""A Tinker-compatible training service (``posttrain tinker-serve``): the HTTP API that the
official ``tinker`` SDK speaks (sessions, futures polled by ``retrieve_future``, protobuf
forward-backward and sampling results), backed by one base model with a LoRA adapter a
training client, and a torch engine for sampling (docs/tinker.md)."""
