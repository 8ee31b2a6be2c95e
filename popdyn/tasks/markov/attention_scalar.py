"""The (e, w, a) attention-scalar model — popdyn's choice for the paper's unknown Fig 2/5 model
(spec markov.md §2.4, tagged [our choice]; do not read its dynamics as the paper's).

Uniform causal attention (W_Q = W_K = 0), W_V = a·ααᵀ, W_O = I on the rank-one weights of §2.2 give
logit_n = e²r_n + 4w|w|e²·ReLU(r_n) + b,  r_n = (x_n − ½) + a(x̄_n − ½),  x̄_n = S_n / n,
which depends on (n, x_n, S_n) only, so its exact loss is the O(N²) count DP of §3.3. At a = 0 it is
the canonical (e, w, b) model. The bias b is trained (no closed-form optimum here).
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from popdyn import _validate
from popdyn.exact import Chain, count_dp_loss, entropy_rate, unigram_loss
from popdyn.problem import Problem, Theta


class AttentionScalar(Problem):
    """θ = {"e", "w", "a", "b"} on a binary (p, q) chain, sequences of length N (loss by the count DP)."""

    chain: Chain
    N: int = eqx.field(static=True)
    init_std: float = eqx.field(static=True)

    def __init__(self, p: float, q: float, N: int, init_std: float = 0.01):
        self.chain = Chain.binary(p, q)
        self.N = _validate.int_at_least("N", N, 1)
        self.init_std = _validate.positive("init_std", init_std)

    def logit(self, theta: Theta, n, x, s) -> Array:
        """logit P(x_{n+1} = 1 | n, x_n, S_n) (the e > 0 form for every e, as in the canonical model)."""
        e2, w = theta["e"] ** 2, theta["w"]
        r = (x - 0.5) + theta["a"] * (s / n - 0.5)
        return e2 * r + 4.0 * w * jnp.abs(w) * e2 * jax.nn.relu(r) + theta["b"]

    def loss(self, theta: Theta) -> Float[Array, ""]:
        """Exact mean next-token cross-entropy over positions 1..N by the count DP (§3.3)."""
        return count_dp_loss(self.chain, self.N, lambda n, x, s: self.logit(theta, n, x, s))

    def entropy_rate(self) -> float:
        """H_rate, the global minimum (reached at a = 0 on Γ*, as in the canonical model)."""
        return entropy_rate(self.chain.kernel)

    def unigram_loss(self) -> float:
        """H_uni, the loss of every point with e = 0 (the logit is then the constant b*)."""
        return unigram_loss(self.chain.kernel)

    def attractors(self):
        """Global minima (loss − H_rate, which vanishes exactly there) and the unigram set e = 0 (|e|)."""
        h_rate = self.entropy_rate()
        return {"global": lambda th: jnp.abs(self.loss(th) - h_rate), "local": lambda th: jnp.abs(th["e"])}

    def init(self, key: Array) -> Theta:
        """e, w, a ~ init_std·N(0, 1), b = 0."""
        z = self.init_std * jax.random.normal(key, (3,))
        return {"e": z[0], "w": z[1], "a": z[2], "b": jnp.zeros(())}
