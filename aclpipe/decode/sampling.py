"""Choosing the next token from a row of logits: greedy, or temperature / top-k sampling."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = ["Sampler"]


@dataclass
class Sampler:
    """How one request picks its tokens.

    ``temperature`` 0 is greedy (argmax, the first of equal maxima, as numpy and onnxruntime
    reference loops pick).  Otherwise logits are divided by it, cut to the ``top_k`` largest
    when given, and a token is drawn from their softmax with a generator seeded by ``seed``
    (the same seed gives the same tokens).
    """

    temperature: float = 0.0
    top_k: int | None = None
    seed: int | None = None
    _rng: np.random.Generator = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if not np.isfinite(self.temperature) or self.temperature < 0:
            raise ValueError(f"temperature must be a finite number >= 0, got {self.temperature!r}")
        if self.top_k is not None and (isinstance(self.top_k, bool) or not isinstance(self.top_k, int)
                                       or self.top_k < 1):
            raise ValueError(f"top_k must be a positive int or None, got {self.top_k!r}")
        self._rng = np.random.default_rng(self.seed)

    def pick(self, logits: np.ndarray) -> int:
        """The next token from one row of logits [vocab]."""
        if self.temperature == 0:
            return int(np.argmax(logits))
        scaled = logits.astype(np.float64) / self.temperature
        if self.top_k is not None and self.top_k < scaled.size:
            cut = np.partition(scaled, -self.top_k)[-self.top_k]
            scaled = np.where(scaled >= cut, scaled, -np.inf)
        weights = np.exp(scaled - scaled.max())
        return int(self._rng.choice(scaled.size, p=weights / weights.sum()))
