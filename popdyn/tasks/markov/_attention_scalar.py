"""The (e, w, a) attention-scalar model — popdyn's choice for the paper's unknown Fig 2/5 model
(docs/models/markov.md §2.4, tagged [our choice]; do not read its dynamics as the paper's).

Uniform causal attention (W_Q = W_K = 0), W_V = a·ααᵀ, W_O = I on the rank-one weights of §2.2 give
logit_n = e²r_n + 4w|w|e²·ReLU(r_n) + b,  r_n = (x_n − ½) + a(x̄_n − ½),  x̄_n = S_n / n,
which depends on (n, x_n, S_n) only, so its exact loss is the O(N²) count DP of §3.3. At a = 0 it is
the canonical model. b is trained by default; with ``bias="profiled"`` (as for the paper's L(e, w)) it is
replaced by its optimum b*(e, w, a), the root of ∂L/∂b (convex in b), differentiated implicitly (exact
Hessians). Measured cost: a batched gradient over 1024 points takes 22 ms trained and 1.2 s profiled
(60 safeguarded Newton iterations per evaluation), so profiled flows over whole grids are not yet practical.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from popdyn import _validate
from popdyn.exact import Chain
from popdyn.exact._count_dp import count_grid, count_occupancy, occupancy_loss
from popdyn.exact._enumeration import MAX_SEQUENCES
from popdyn.exact._tables import WeightedTable
from popdyn.problem import Problem, Theta
from popdyn.tasks._leaves import leaf
from popdyn.tasks.markov._canonical import binary_entropy_rate, binary_unigram_loss
from popdyn.tasks.markov._examples import next_token_loss, sequence_table

_NEWTON_ITERS = 60


def _safeguarded_newton(g, lo, hi, b0, iters: int = _NEWTON_ITERS):
    """Root of an increasing g on [lo, hi] (g(lo) < 0 < g(hi)): Newton steps, bisection whenever a
    Newton step leaves the bracket (rtsafe); fixed iteration count so it jits and vmaps."""

    def body(_, state):
        b, lo, hi = state
        gb, dgb = jax.jvp(g, (b,), (jnp.ones_like(b),))
        lo = jnp.where(gb < 0, b, lo)
        hi = jnp.where(gb > 0, b, hi)
        newton = b - gb / dgb
        ok = jnp.isfinite(newton) & (newton > lo) & (newton < hi)
        return jnp.where(ok, newton, 0.5 * (lo + hi)), lo, hi

    b, _, _ = jax.lax.fori_loop(0, iters, body, (b0, lo, hi))
    return b


class AttentionScalar(Problem):
    """θ = {"e", "w", "a"} (``bias="profiled"``) or {"e", "w", "a", "b"} (``bias="trained"``) on a binary
    (p, q) chain, sequences of length N; loss by the count DP. p, q and init_std are 0-d array leaves, like the
    chain (a new value compiles nothing; problems of one N stack and vmap); N and bias are static.

    **Arguments:**

    - ``p``: P(next = 1 | current = 0) ∈ (0, 1); ``q``: P(next = 0 | current = 1) ∈ (0, 1).
    - ``N``: the number of predicted positions (≥ 1).
    - ``bias``: ``"trained"`` (b a coordinate of θ, from 0) or ``"profiled"``.
    - ``init_std``: the std of ``init``'s e, w and a (> 0).
    """

    chain: Chain
    occupancy: Array
    p: Float[Array, ""]
    q: Float[Array, ""]
    init_std: Float[Array, ""]
    N: int = eqx.field(static=True)
    bias: str = eqx.field(static=True)

    def __init__(self, p: float, q: float, N: int, bias: str = "trained", init_std: float = 0.01):
        self.chain = Chain.binary(p, q)
        self.p, self.q = leaf(float(p)), leaf(float(q))
        self.N = _validate.int_at_least("N", N, 1)
        self.bias = _validate.choice("bias", bias, ("profiled", "trained"))
        self.init_std = leaf(_validate.positive("init_std", init_std))
        self.occupancy = count_occupancy(self.chain, self.N)

    def logit(self, theta: Theta, n, x, s) -> Array:
        """logit P(x_{n+1} = 1 | n, x_n, S_n) without the bias (the e > 0 form for every e, as in the
        canonical model)."""
        e2, w = theta["e"] ** 2, theta["w"]
        r = (x - 0.5) + theta["a"] * (s / n - 0.5)
        return e2 * r + 4.0 * w * jnp.abs(w) * e2 * jax.nn.relu(r)

    def optimal_bias(self, theta: Theta) -> Float[Array, ""]:
        """b*(e, w, a) = argmin_b L: the root of ∂L/∂b = (1/N) Σ α (σ(f + b) − P(x, 1)), found by
        safeguarded Newton and differentiated by the implicit function theorem (lax.custom_root)."""
        f = self.logit(theta, *count_grid(self.N))

        def dL_db(b):
            return jax.grad(lambda b: occupancy_loss(self.chain, self.occupancy, f + b))(b)

        width = jnp.max(jnp.abs(jax.lax.stop_gradient(f))) + 40.0

        def solve(g, b0):
            return _safeguarded_newton(g, -width, width, b0)

        return jax.lax.custom_root(dL_db, jnp.zeros_like(theta["e"]), solve, lambda g, y: y / g(1.0))

    def bias_value(self, theta: Theta) -> Float[Array, ""]:
        """b: θ's own when trained, b*(e, w, a) (``optimal_bias``) when profiled.

        **Arguments:**

        - ``theta``: {"e", "w", "a"} or {"e", "w", "a", "b"}.
        """
        return theta["b"] if self.bias == "trained" else self.optimal_bias(theta)

    def loss(self, theta: Theta) -> Float[Array, ""]:
        """Exact mean next-token cross-entropy over positions 1..N (count DP, §3.3)."""
        b = self.bias_value(theta)
        return occupancy_loss(self.chain, self.occupancy, self.logit(theta, *count_grid(self.N)) + b)

    def examples(self) -> WeightedTable:
        """One training sequence x_1..x_{N+1} of the chain (its N next tokens observed, as the authors' training
        samples them, §6): all 2^{N+1} sequences with their probabilities; ValueError when 2^{N+1} > MAX_SEQUENCES
        (docs/models/markov.md, "Per-example data")."""
        return sequence_table(self.chain, self.N, MAX_SEQUENCES, type(self).__name__)

    def example_loss(self, theta: Theta, x) -> Float[Array, ""]:
        """ℓ(θ, x) = (1/N) Σ_n CE(x_{n+1}, σ(logit(n, x_n, S_n) + b)) of one sequence x = x_1..x_{N+1}
        (S_n = x_1 + … + x_n; b* of the population when profiled), so that E_x ℓ(θ, x) = ``loss(θ)``.

        **Arguments:**

        - ``theta``: {"e", "w", "a"} or {"e", "w", "a", "b"}.
        - ``x``: one point of ``examples()``, N + 1 tokens.
        """
        b = self.bias_value(theta)
        tokens = x[: self.N]
        return next_token_loss(self.logit(theta, jnp.arange(1, self.N + 1), tokens, jnp.cumsum(tokens)) + b, x[1:])

    def entropy_rate(self) -> float:
        """H_rate, the global minimum (reached at a = 0 on Γ*, as in the canonical model); a float outside
        transformations."""
        return binary_entropy_rate(self.p, self.q)

    def unigram_loss(self) -> float:
        """H_uni, the loss of every point with e = 0 (the logit is then the constant b*); a float outside
        transformations."""
        return binary_unigram_loss(self.p, self.q)

    def attractors(self):
        """Global minima (loss − H_rate, which vanishes exactly there) and the unigram set e = 0 (|e|)."""
        h_rate = self.entropy_rate()
        return {"global": lambda th: jnp.abs(self.loss(th) - h_rate), "local": lambda th: jnp.abs(th["e"])}

    def init(self, key: Array) -> Theta:
        """e, w, a ~ init_std·N(0, 1) (and b = 0 when trained)."""
        z = self.init_std * jax.random.normal(key, (3,))
        theta = {"e": z[0], "w": z[1], "a": z[2]}
        if self.bias == "trained":
            theta["b"] = jnp.zeros(())
        return theta
