"""Episodes that make more episodes: tree rollouts (``tree``: branches from earlier steps, for
``tree_grpo``) and agent swarms (``swarm``: sub-agents an orchestrator spawns)."""
