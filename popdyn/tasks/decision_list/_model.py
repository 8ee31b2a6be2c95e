"""The one-layer softmax transformer on decision lists, f(X) = σ(V X σ(XᵀWX)), and its exact population
loss by histogram enumeration (docs/models/decision_lists.md §1 (F1)–(F3), §3 B).

Query token a attends to the present tokens with α_b ∝ h_b e^{W[b, a]} (F1), outputs softmax(V α) (F2),
and the loss is Σ_h P(h) (1/n) Σ_a h_a ℓ(a; h) (F3), a sum over C(L, n) subsets (distinct tokens) or
C(L+n−1, n) multisets (i.i.d. tokens) instead of L^n sequences.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int

from popdyn import _validate
from popdyn.exact._histograms import Histograms
from popdyn.exact._tables import WeightedTable
from popdyn.problem import Problem, Theta
from popdyn.tasks._leaves import leaf
from popdyn.tasks.decision_list._data import validate_lists, validate_perm, validate_sizes
from popdyn.tasks.decision_list._reduced import is_column_structured, structured_total_loss


def permutation_matrix(perm) -> np.ndarray:
    """P with P[k, b] = 1 iff k = π(b), so P e_b = e_{π(b)} (§0): V = cP predicts the label of the
    label-determining token.

    **Arguments:**

    - ``perm``: π as a permutation of 0..L−1 (``perm[b] = π(b)``).

    Returns the L × L float matrix P.
    """
    L = len(perm)
    P = np.zeros((L, L))
    P[list(perm), np.arange(L)] = 1.0
    return P


class DecisionList(Problem):
    """Decision lists on L tokens, sequences of n tokens (§0–§3).

    θ = {"W", "V"} (``train="both"``, Theorem 2) or {"W"} with V = cP fixed (``train="W"``, Theorem 1).
    ``distribution`` is "distinct" (a uniform n-subset, the default) or "iid" — both [our choice], the
    paper's law being unknown (§2). ``init`` gives W₀ = 0 and V₀ = cP + U(−ε/2, ε/2) with ε = ``init_eps``.
    c and init_eps are 0-d array leaves (a new value compiles nothing; problems of one list structure stack and
    vmap); sizes, lists, perm and the flags are static.

    **Arguments:**

    - ``L``: the number of tokens (≥ 2); ``n``: the sequence length (≤ L for distinct tokens).
    - ``lists``: one decision list per token (``validate_lists``); ``perm``: the labels π (``validate_perm``).
    - ``distribution``: the sequence law, one of ``DISTRIBUTIONS``.
    - ``c``: the scale of V = cP (> 0).
    - ``train``: ``"both"`` (θ = {"W", "V"}) or ``"W"`` (V = cP fixed).
    - ``init_eps``: the width ε of ``init``'s uniform perturbation of V₀ (≥ 0).
    - ``chunk``: histograms per step of the exact enumeration.
    """

    table: Histograms
    list_pad: Int[Array, "L M"]
    perm_arr: Int[Array, " L"]
    c: Float[Array, ""]
    init_eps: Float[Array, ""]
    L: int = eqx.field(static=True)
    n: int = eqx.field(static=True)
    lists: tuple = eqx.field(static=True)
    perm: tuple = eqx.field(static=True)
    distribution: str = eqx.field(static=True)
    train: str = eqx.field(static=True)

    def __init__(
        self,
        L: int,
        n: int,
        lists,
        perm,
        distribution: str = "distinct",
        c: float = 1.0,
        train: str = "both",
        init_eps: float = 0.0,
        chunk: int = 8192,
    ):
        self.L, self.n, self.distribution = validate_sizes(L, n, distribution)
        self.lists, self.perm = validate_lists(lists, self.L), validate_perm(perm, self.L)
        self.c = leaf(_validate.positive("c", c))
        self.train = _validate.choice("train", train, ("both", "W"))
        self.init_eps = leaf(_validate.positive("init_eps", init_eps, allow_zero=True))
        chunk = _validate.int_at_least("chunk", chunk, 1)  # before Histograms' runtime type check sees a float
        self.table = Histograms(self.L, self.n, distinct=self.distribution == "distinct", chunk=chunk)
        M = self.max_length
        pad = np.full((self.L, M), self.L, dtype=np.int32)  # index L = an always-absent token
        for a, lst in enumerate(self.lists):
            pad[a, : len(lst)] = lst
        self.list_pad = jnp.asarray(pad)
        self.perm_arr = jnp.asarray(self.perm, dtype=jnp.int32)

    @property
    def max_length(self) -> int:
        """M, the longest list."""
        return max(len(lst) for lst in self.lists)

    @property
    def P(self) -> np.ndarray:
        """The label permutation matrix (§0)."""
        return permutation_matrix(self.perm)

    def weights(self, theta: Theta) -> tuple[Float[Array, "L L"], Float[Array, "L L"]]:
        """(W, V), with V = cP when only W is trained."""
        V = theta["V"] if self.train == "both" else self.c * jnp.asarray(self.P)
        return theta["W"], V

    def labels(self, tokens: Int[Array, " n"], logc: Float[Array, " n"]) -> Int[Array, " n"]:
        """y = π(LDT(a, h)) for the query token a of every slot: the first list entry present in h."""
        present = jnp.zeros(self.L + 1, bool).at[tokens].max(logc > -jnp.inf)
        hits = present[self.list_pad[tokens]]  # (n, M)
        first = jnp.argmax(hits, axis=1)
        return self.perm_arr[jnp.take_along_axis(self.list_pad[tokens], first[:, None], axis=1)[:, 0]]

    def logits(self, theta: Theta, tokens: Int[Array, " n"], logc: Float[Array, " n"]) -> Float[Array, "L n"]:
        """z(a; h) = V α(a; h) for the query token of every slot (F1, F2); column j is slot j's query."""
        W, V = self.weights(theta)
        att = jax.nn.softmax(logc[:, None] + W[tokens[:, None], tokens[None, :]], axis=0)
        return V[:, tokens] @ att

    def histogram_loss(self, theta: Theta, tokens: Int[Array, " n"], logc: Float[Array, " n"]) -> Float[Array, ""]:
        """(1/n) Σ_a h_a [logsumexp z(a; h) − z(a; h)_y]: the loss of one sequence, through its histogram h (F3).

        **Arguments:**

        - ``theta``: {"W", "V"} or {"W"}.
        - ``tokens``, ``logc``: h as a row of the histogram table: its distinct tokens padded to n slots and their
          log-counts (−inf on padding).
        """
        z = self.logits(theta, tokens, logc)
        zy = jnp.take_along_axis(z, self.labels(tokens, logc)[None, :], axis=0)[0]
        return jnp.sum(jnp.exp(logc) / self.n * (jax.nn.logsumexp(z, axis=0) - zy))

    def loss(self, theta: Theta) -> Float[Array, ""]:
        """ℒ(W, V) = Σ_h P(h) (1/n) Σ_a h_a [logsumexp z(a; h) − z(a; h)_y] (F3), by histogram enumeration."""
        return self.table.expectation(lambda tokens, logc: self.histogram_loss(theta, tokens, logc))

    def examples(self) -> WeightedTable:
        """One training sequence s of the sequence law, by its histogram h (its loss depends on nothing else, §1):
        points {"tokens", "logc"}, the rows of the histogram table, with their probabilities P(h); under
        ``"distinct"`` the C(L, n) subsets are equally likely (docs/models/decision_lists.md, "Per-example data")."""
        size, n = self.table.size, self.n
        return WeightedTable(
            {"tokens": self.table.tokens.reshape(-1, n)[:size], "logc": self.table.logc.reshape(-1, n)[:size]},
            self.table.prob.reshape(-1)[:size],
        )

    def example_loss(self, theta: Theta, x) -> Float[Array, ""]:
        """ℓ(θ, x) = ``histogram_loss(θ, x["tokens"], x["logc"])``, the loss of one sequence, so that
        E_x ℓ(θ, x) = ``loss(θ)``.

        **Arguments:**

        - ``theta``: {"W", "V"} or {"W"}.
        - ``x``: one point of ``examples()``.
        """
        return self.histogram_loss(theta, x["tokens"], x["logc"])

    def evaluate(self, theta: Theta) -> tuple[float, str]:
        """(ℒ(θ), path) for a concrete θ, choosing the cheapest exact path: the structured reduction (§3 C,
        O(M·2^M·n) per column) when V = cP with c > 0 and W is column-structured, else histogram enumeration."""
        W, V = (np.asarray(x, dtype=float) for x in self.weights(theta))
        c = float(V[self.perm[0], 0])
        if c > 0 and np.allclose(V, c * self.P, rtol=0, atol=1e-12 * c) and is_column_structured(W, self.lists):
            value = structured_total_loss(W, self.lists, L=self.L, n=self.n, c=c, distribution=self.distribution)
            return float(value), "structured"
        return float(self.loss(theta)), "histograms"

    def margin(self, theta: Theta) -> Float[Array, ""]:
        """min over histograms and present queries of z_y − max_{k≠y} z_k; perfect classification ⇔ > 0
        (§4; a tie counts as failure)."""

        def per_histogram(tokens, logc):
            z = self.logits(theta, tokens, logc)
            y = self.labels(tokens, logc)
            zy = jnp.take_along_axis(z, y[None, :], axis=0)[0]
            others = jnp.where(jax.nn.one_hot(y, self.L, axis=0) > 0, -jnp.inf, z)
            return jnp.min(jnp.where(logc > -jnp.inf, zy - jnp.max(others, axis=0), jnp.inf))

        return self.table.minimum(per_histogram)

    def perfectly_classifies(self, theta: Theta) -> Array:
        """Perfect classification: every present query of every histogram has a strict argmax at its label."""
        return self.margin(theta) > 0

    def init(self, key: Array) -> Theta:
        """W₀ = 0 and (when trained) V₀ = cP + U(−ε/2, ε/2)."""
        W = jnp.zeros((self.L, self.L))
        if self.train == "W":
            return {"W": W}
        noise = jax.random.uniform(key, (self.L, self.L), minval=-0.5, maxval=0.5) * self.init_eps
        return {"W": W, "V": self.c * jnp.asarray(self.P) + noise}
