"""The tau-bench domains: each one's database model and tools (mock, retail, telecom-small)."""
