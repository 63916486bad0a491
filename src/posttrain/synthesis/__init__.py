"""Task synthesis (docs/synthesis.md): builders of verifiable tasks (tool environments: a
database, tools, a task and a verifier), the loop that validates what a builder writes,
has it fixed and made harder, and the report of what was kept and dropped."""
