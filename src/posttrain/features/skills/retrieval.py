"""Which skills a task gets (AutoSkill's hybrid relevance, SkillRL's general + retrieved):

``Rel(s) = lam * d(s) + (1 - lam) * b(s)``, where ``b`` is the skill's BM25+ (rank_bm25) score
for the query and ``d`` the cosine of query and skill embeddings, each min-max normalised over
the bank's retrievable skills (all equal: 1 where positive, else 0, so a lone skill that matches
at all is fully relevant). The query gets every general skill, then up to ``top_k`` others:
those it triggers (names a trigger phrase of), then those with ``Rel >= threshold``, each group
best first. ``embed`` is any function from texts to vectors (a sentence-embedding model);
``hashed_embedding``, a hashed bag of words, stands in for one where no model is at hand.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Sequence

import numpy as np
from rank_bm25 import BM25Plus

from posttrain.features.skills.skill import Skill

Embed = Callable[[Sequence[str]], np.ndarray]


def words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


def hashed_embedding(texts: Sequence[str], dim: int = 256) -> np.ndarray:
    """Each text's words (and word pairs) counted into ``dim`` buckets by a stable hash
    (blake2b), L2-normalised: a deterministic stand-in for a sentence embedding."""
    out = np.zeros((len(texts), dim))
    for i, text in enumerate(texts):
        tokens = words(text)
        for feature in tokens + [f"{a} {b}" for a, b in zip(tokens, tokens[1:])]:
            digest = hashlib.blake2b(feature.encode(), digest_size=8).digest()
            out[i, int.from_bytes(digest, "little") % dim] += 1.0
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    return out / np.where(norms == 0, 1.0, norms)


def min_max(x: np.ndarray) -> np.ndarray:
    """``(x - min) / (max - min)``; all equal: 1 where positive (a match), else 0."""
    span = x.max() - x.min() if x.size else 0.0
    return (x - x.min()) / span if span > 0 else (x > 0).astype(float)


class SkillIndex:
    """Retrieval over ``skills`` (see the module docstring)."""

    def __init__(self, skills: Sequence[Skill], embed: Embed = hashed_embedding,
                 lam: float = 0.5, threshold: float = 0.3, top_k: int = 3) -> None:
        if not 0 <= lam <= 1:
            raise ValueError(f"lam must lie in [0, 1], got {lam}")
        self.general = [s for s in skills if s.general]
        self.candidates = [s for s in skills if not s.general]
        self.embed, self.lam, self.threshold, self.top_k = embed, lam, threshold, top_k
        texts = [s.text() for s in self.candidates]
        self._bm25 = BM25Plus([words(t) or [""] for t in texts]) if texts else None
        self._vectors = embed(texts) if texts else np.zeros((0, 1))

    def relevance(self, query: str) -> np.ndarray:
        """``Rel`` of each retrievable skill for ``query``."""
        if not self.candidates:
            return np.zeros(0)
        lexical = np.asarray(self._bm25.get_scores(words(query)), dtype=float)
        semantic = self._vectors @ self.embed([query])[0]
        return self.lam * min_max(semantic) + (1 - self.lam) * min_max(lexical)

    def retrieve(self, query: str) -> list[Skill]:
        """The general skills, then up to ``top_k`` others: those the query triggers (a
        trigger phrase in it), then those at ``Rel >= threshold``, each by ``Rel``."""
        rel, lowered = self.relevance(query), query.lower()
        triggered = [any(t.lower() in lowered for t in s.triggers) for s in self.candidates]
        order = sorted(range(len(rel)),
                       key=lambda i: (not triggered[i], -rel[i], self.candidates[i].name))
        return self.general + [self.candidates[i] for i in order
                               if triggered[i] or rel[i] >= self.threshold][: self.top_k]
