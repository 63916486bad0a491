"""Features: each a folder that plugs into the core's hooks (``posttrain.hooks``) and holds
everything of its own (docs/architecture.md, "Hooks and features"; docs/README.md lists them
with their keys and pages). The core never imports this package by name; it finds the
features in it."""
