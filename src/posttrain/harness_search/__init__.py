"""Harness search (Meta-Harness): an outer loop over the harness around a fixed model (config
overrides and code: system prompt, context, tools, compaction, skills, budgets) that keeps
every candidate's source, score and raw traces in a filesystem store, asks a proposer for new
candidates, and keeps the Pareto frontier over (score, context tokens). docs/harness_search.md.
"""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
