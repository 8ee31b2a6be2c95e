"""Exact statistics of a finite, first-order Markov chain (docs/models/markov.md §1.1–§1.2).

For a V-state transition matrix P: the stationary law π (πP = π), the entropy rate
H_rate = -Σ_i π_i Σ_j P_ij ln P_ij and the unigram loss H_uni = -Σ_i π_i ln π_i (all in nats).
"""

from __future__ import annotations

import numpy as np
from jaxtyping import Float

from popdyn import _validate

_ROW_TOL = 1e-10


def validate_transition_matrix(P, name: str = "P") -> np.ndarray:
    """Check that ``P`` is a square, row-stochastic, irreducible matrix; return it as float64.

    Entries must lie in [0, 1], every row must sum to 1 (to 1e-10), and every state must reach every other
    (irreducible: the stationary law π is then unique). Raises ValueError naming the entry or row that fails.

    **Arguments:**

    - ``P``: the V × V transition matrix, P[i, j] = P(next = j | current = i), V ≥ 2.
    - ``name``: the parameter name the errors use.
    """
    P = _validate.float_array(name, P)
    if P.ndim != 2 or P.shape[0] != P.shape[1] or P.shape[0] < 2:
        raise ValueError(f"{name} has shape {P.shape}: must be a square V x V matrix with V >= 2")
    if not np.all(np.isfinite(P)):
        raise ValueError(f"{name} has non-finite entries: all entries must lie in [0, 1]")
    bad = np.argwhere((P < 0.0) | (P > 1.0))
    if bad.size:
        i, j = bad[0]
        raise ValueError(f"{name}[{i},{j}]={float(P[i, j])!r} is out of range: entries must lie in [0, 1]")
    sums = P.sum(axis=1)
    bad_rows = np.flatnonzero(np.abs(sums - 1.0) > _ROW_TOL)
    if bad_rows.size:
        i = bad_rows[0]
        raise ValueError(f"row {i} of {name} sums to {float(sums[i])!r}: every row must sum to 1 (stochastic matrix)")
    # Irreducible iff every state reaches every other: (I + A)^(V-1) > 0 for the adjacency A, computed on the
    # 0/1 pattern by repeated squaring (the powers themselves overflow float64 for V in the hundreds).
    V = P.shape[0]
    reach, length = (np.eye(V) + (P > 0)) > 0, 1  # paths of at most `length` steps
    while length < V - 1:
        reach = (reach.astype(np.float64) @ reach.astype(np.float64)) > 0
        length *= 2
    if not reach.all():
        i, j = np.argwhere(~reach)[0]
        raise ValueError(
            f"{name} is reducible (state {j} is unreachable from state {i}): the chain must be irreducible"
        )
    return P


def binary_kernel(p: float, q: float) -> np.ndarray:
    """P = [[1-p, p], [q, 1-q]]: the binary chain's transition matrix (§1.1), as float64.

    **Arguments:**

    - ``p``: P(next = 1 | current = 0); ``q``: P(next = 0 | current = 1). Not checked here: pass the result to
      ``validate_transition_matrix`` (p, q ∈ (0, 1] make the chain irreducible).
    """
    return np.array([[1.0 - p, p], [q, 1.0 - q]], dtype=np.float64)


def stationary_distribution(P) -> Float[np.ndarray, " V"]:
    """The unique π with πP = π and Σπ = 1, for an irreducible stochastic P (the left Perron vector).

    **Arguments:**

    - ``P``: the V × V row-stochastic transition matrix (checked by ``validate_transition_matrix``).
    """
    P = validate_transition_matrix(P)
    V = P.shape[0]
    # Solve (Pᵀ - I)π = 0 with the normalisation row appended (least squares; exact for irreducible P).
    A = np.vstack([P.T - np.eye(V), np.ones((1, V))])
    b = np.zeros(V + 1)
    b[-1] = 1.0
    pi, *_ = np.linalg.lstsq(A, b, rcond=None)
    return np.clip(pi, 0.0, None) / np.clip(pi, 0.0, None).sum()


def _xlogx(x: np.ndarray) -> np.ndarray:
    return np.where(x > 0, x * np.log(np.where(x > 0, x, 1.0)), 0.0)


def entropy_rate(P) -> float:
    """H_rate = -Σ_i π_i Σ_j P_ij ln P_ij, the optimal next-token (bigram) loss in nats.

    **Arguments:**

    - ``P``: the V × V row-stochastic, irreducible transition matrix.
    """
    P = validate_transition_matrix(P)
    pi = stationary_distribution(P)
    return float(-(pi[:, None] * _xlogx(P)).sum())


def unigram_loss(P) -> float:
    """H_uni = -Σ_i π_i ln π_i (nats): the loss of predicting the stationary law π regardless of context, the
    plateau of a model that ignores the previous token (§1.1).

    **Arguments:**

    - ``P``: an irreducible V × V transition matrix (``validate_transition_matrix``).
    """
    pi = stationary_distribution(P)
    return float(-_xlogx(pi).sum())
