"""Features: each a folder that plugs into the core's hooks (``posttrain.hooks``) and holds
everything of its own (docs/architecture.md, "Hooks and features"): the RL update's advantage
modifiers (``taco``, ``top_entropy``, ``behaviour_reg``, confessions), the rollout metrics of
swarms, CURIO and the actor's gradings, and the MTP head that trains beside the policy (a
trainer add-on) and that the engine drafts with. The core never imports this package by name; it finds the
features in it."""
