# What the package exports. __init__.py loads each name on first use (lazy_loader).

from .frontier import pareto, pick
from .loop import START, HarnessSearch
from .proposers import ChatProposer, MutationProposer, digest, parse_candidates
from .store import Candidate, HarnessStore, Result

__all__ = ["START", "Candidate", "ChatProposer", "HarnessSearch", "HarnessStore",
           "MutationProposer", "Result", "digest", "parse_candidates", "pareto", "pick"]
