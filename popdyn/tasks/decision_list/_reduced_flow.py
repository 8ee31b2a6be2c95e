"""Theorem 1's dynamics on the column-structured subspace: one representative column per list length
(docs/models/decision_lists.md §3 C, §5).

With V = cP fixed the loss splits by columns (Fact 3), W₀ = 0 is column-structured and the subspace is
invariant, and ℒ_a depends on a only through m_a: every column of length m follows the same flow. A column
of length m is stored as (w_1, …, w_m, u) with u = √(L−m)·ω, the isometric coordinate of the L−m equal
distractor entries, so the Euclidean flow on (w, u) is the full-W flow (dω/dt = −(1/(L−m))∂ℒ_a/∂ω, §3 C).
"""

from __future__ import annotations

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from popdyn import _validate
from popdyn.problem import Problem, Theta
from popdyn.tasks._leaves import leaf
from popdyn.tasks.decision_list._classification import log_max_counts
from popdyn.tasks.decision_list._data import validate_sizes
from popdyn.tasks.decision_list._reduced import column_loss


def _key(m: int) -> str:
    return f"m{m}"


class ReducedDecisionList(Problem):
    """θ = {"m1": (w_1, u), "m2": (w_1, w_2, u), …} for the list lengths in ``lengths`` (u absent when m = L);
    loss = Σ_m ℒ_m(column), the loss of one column of each length (§3 C (F5) / the i.i.d. partition sum).
    c is a 0-d array leaf (a new value compiles nothing; problems of one shape stack and vmap); the rest is static.
    The distractor coordinate u = √(L − m)·ω, so the flow on θ is the flow of the full structured W.

    **Arguments:**

    - ``L``: the number of tokens; ``n``: the sequence length (≤ L for distinct tokens).
    - ``lengths``: the list lengths present, each in 1..L.
    - ``c``: the scale of V = cP (> 0).
    - ``distribution``: the sequence law, one of ``DISTRIBUTIONS``.
    """

    c: Float[Array, ""]
    L: int = eqx.field(static=True)
    n: int = eqx.field(static=True)
    lengths: tuple[int, ...] = eqx.field(static=True)
    distribution: str = eqx.field(static=True)

    def __init__(self, L: int, n: int, lengths, c: float, distribution: str = "distinct"):
        self.L, self.n, self.distribution = validate_sizes(L, n, distribution)
        lengths = _validate.int_sequence("lengths", lengths)
        if not lengths or min(lengths) < 1 or max(lengths) > self.L:
            raise ValueError(
                f"lengths={list(lengths)} is out of range: must be a non-empty set of list lengths in 1..L={self.L}"
            )
        self.lengths = tuple(sorted(set(lengths)))
        self.c = leaf(_validate.positive("c", c))

    def column(self, theta: Theta, m: int) -> tuple[Float[Array, " m"], Float[Array, ""]]:
        """(w, ω) of the representative column of length m."""
        x = theta[_key(m)]
        omega = x[m] / np.sqrt(self.L - m) if m < self.L else jnp.zeros((), x.dtype)
        return x[:m], omega

    def column_losses(self, theta: Theta) -> Float[Array, " K"]:
        """ℒ_m for each length m in ``lengths``."""
        return jnp.stack(
            [
                column_loss(*self.column(theta, m), L=self.L, n=self.n, c=self.c, distribution=self.distribution)
                for m in self.lengths
            ]
        )

    def loss(self, theta: Theta) -> Float[Array, ""]:
        return jnp.sum(self.column_losses(theta))

    def pc_slack(self, theta: Theta) -> Float[Array, " K"]:
        """Per length: min over firing rules j and tokens b of W[a_j,a] − W[b,a] − log κ_j(b) (§4, exact for
        V = cP); the column classifies perfectly iff its slack is > 0."""
        out = []
        for m in self.lengths:
            w, omega = self.column(theta, m)
            lst = tuple(range(m))  # representative list; token m stands for every distractor
            ks = np.stack([log_max_counts(self.L, self.n, lst, j, self.distribution) for j in range(1, m + 1)])
            ks = ks[:, : m + 1] if m < self.L else ks[:, :m]
            x = jnp.concatenate([w, omega[None]]) if m < self.L else w
            gaps = jnp.where(np.isfinite(ks), w[:, None] - x[None, :] - np.where(np.isfinite(ks), ks, 0.0), jnp.inf)
            out.append(jnp.min(gaps))
        return jnp.stack(out)

    def embed(self, theta: Theta, lists) -> Float[Array, "L L"]:
        """The full column-structured W for ``lists`` (column a takes the state of its list length)."""
        W = jnp.zeros((self.L, self.L))
        for a, lst in enumerate(lists):
            w, omega = self.column(theta, len(lst))
            col = jnp.full(self.L, omega).at[jnp.asarray(lst)].set(w)
            W = W.at[:, a].set(col)
        return W

    def init(self, key: Array | None) -> Theta:
        """W₀ = 0 (Theorem 1); ``key`` is unused."""
        return {_key(m): jnp.zeros(m + (m < self.L)) for m in self.lengths}
