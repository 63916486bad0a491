"""Task synthesis (docs/synthesis.md): builders of verifiable tasks (tool environments: a
database, tools, a task and a verifier; knowledge-graph questions; code tasks from a
repository's commits), the loop that validates what a builder writes, has it fixed and made
harder, the report of what was kept and dropped, and the task builder as a policy
(``task_builder``: rewarded by the correctness and difficulty of what it builds)."""
