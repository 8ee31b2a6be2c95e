"""The one-layer linear transformer on sparse contextual bigrams and its exact population loss
(docs/models/scb.md §2–§4).

f(x_{1:T+1}) = V X a_k with X = [e_{x_1} … e_{x_T}], k = x_{T+1} and a_k = A e_k; the loss is
L(V, A) = ½ E‖y − f‖² in the closed form of §3 (O(N² + NT), no enumeration). ``SoftmaxBigram`` is the
position-only softmax variant a_k = softmax(W e_k) of Fig. 2, on the same closed form.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Int

from popdyn import _validate
from popdyn.exact._tables import WeightedTable
from popdyn.problem import Problem, Theta
from popdyn.tasks.scb._brute_force import MAX_SEQUENCES, sequence_table
from popdyn.tasks.scb._instance import validate_instance
from popdyn.tasks.scb.sampling import draw_residual


class SparseBigram(Problem):
    """SCB data (P, Qm, μ) + the linear-attention model; θ = {"V": N×N, "A": T×N} (docs/models/scb.md §1–§2).

    ``P`` is column-stochastic with unique stationary μ > 0 and the columns of ``Qm`` lie in Δ_T; both are
    checked by ``validate_instance`` (ValueError naming P or Qm). The instance is built eagerly from
    concrete arrays; its fields are arrays, so constructed instances stack and vmap.

    **Arguments:**

    - ``P``: the N × N column-stochastic transition matrix, P[i, j] = Pr(next = i | source = j).
    - ``Qm``: the T × N attention targets, column k the law q_k over the T positions (``random_instance`` draws
      both).
    """

    P: Float[Array, "N N"]
    Qm: Float[Array, "T N"]
    mu: Float[Array, " N"]

    def __init__(self, P, Qm):
        P, Qm, mu = validate_instance(P, Qm)
        self.P, self.Qm, self.mu = jnp.asarray(P), jnp.asarray(Qm), jnp.asarray(mu)

    # ---- sizes and the scalars of §3 --------------------------------------------------------
    @property
    def N(self) -> int:
        return self.P.shape[-1]

    @property
    def T(self) -> int:
        return self.Qm.shape[-2]

    @property
    def mu_sq(self) -> Float[Array, ""]:
        """‖μ‖²."""
        return self.mu @ self.mu

    @property
    def c(self) -> Float[Array, ""]:
        """c = tr(PΣPᵀ) = ‖P − μ1ᵀ‖_μ², Σ = D_μ − μμᵀ (§3)."""
        return self.mu_norm(self.P - self.mu[:, None]) ** 2

    @property
    def qbar(self) -> Float[Array, ""]:
        """q̄ = Σ_k μ_k ‖q_k‖² ∈ [1/Q, 1] (§3)."""
        return self.mu_norm(self.Qm) ** 2

    @property
    def L_star(self) -> Float[Array, ""]:
        """L* = ½(1 − ‖μ‖² − q̄c), the Bayes risk and the minimum of L (§3)."""
        return 0.5 * (1.0 - self.mu_sq - self.qbar * self.c)

    # ---- geometry (§2, §4) ------------------------------------------------------------------
    def mu_inner(self, X: Float[Array, "R N"], Y: Float[Array, "R N"]) -> Float[Array, ""]:
        """⟨X, Y⟩_μ = tr(X D_μ Yᵀ) (§2)."""
        return jnp.sum(X * Y * self.mu)

    def mu_norm(self, M: Float[Array, "R N"]) -> Float[Array, ""]:
        """‖M‖_μ = sqrt(tr(M D_μ Mᵀ)) = sqrt(Σ_k μ_k ‖M e_k‖²) (§2)."""
        return jnp.sqrt(self.mu_inner(M, M))

    def distances(self, theta: Theta) -> tuple[Float[Array, ""], Float[Array, ""]]:
        """(‖V − P‖_μ, ‖A − Qm‖_μ), the distances plotted in Fig. 1 (§2)."""
        return self.mu_norm(theta["V"] - self.P), self.mu_norm(theta["A"] - self.Qm)

    def signals(self, theta: Theta) -> tuple[Float[Array, ""], Float[Array, ""]]:
        """(α_V, α_A) = (⟨V − μ1ᵀ, P − μ1ᵀ⟩_μ / c, ⟨A − 11ᵀ/T, Qm − 11ᵀ/T⟩_μ / (q̄ − 1/T)) (§4); NaN or ±inf
        when c = 0 (P = μ1ᵀ) or q̄ = 1/T (uniform attention)."""
        dP, dQ = self.P - self.mu[:, None], self.Qm - 1.0 / self.T
        return (
            self.mu_inner(theta["V"] - self.mu[:, None], dP) / self.c,
            self.mu_inner(theta["A"] - 1.0 / self.T, dQ) / (self.qbar - 1.0 / self.T),
        )

    def precondition(self, grad: Theta, project: bool = False) -> Theta:
        """The direction (∇_V D_μ⁻¹, ∇_(a_k)/μ_k) of §4; ``project`` applies Π_T = I − 11ᵀ/T on the left of
        the A-part, which keeps every column sum of A fixed. Pure in ``grad``: θ ← θ − η·precondition(∇L)."""
        gV, gA = grad["V"] / self.mu, grad["A"] / self.mu
        if project:
            gA = gA - jnp.mean(gA, axis=-2, keepdims=True)
        return {"V": gV, "A": gA}

    # ---- the Problem -------------------------------------------------------------------------
    def attention(self, theta: Theta) -> Float[Array, "T N"]:
        """A: column k is the attention a_k of last token k."""
        return theta["A"]

    def loss(self, theta: Theta) -> Float[Array, ""]:
        """L = ½ + Σ_k μ_k[−(a_k·q_k) tr(VΣPᵀ) − (1ᵀa_k)(Vμ)·(Pμ) + ½‖a_k‖² tr(VΣVᵀ) + ½(1ᵀa_k)²‖Vμ‖²]
        (§3, general form with ν = μ), with tr(VΣWᵀ) = Σ_ij V_ij W_ij μ_j − (Vμ)·(Wμ)."""
        V, A = theta["V"], self.attention(theta)
        Vmu, Pmu = V @ self.mu, self.P @ self.mu
        VP, VV = Vmu @ Pmu, Vmu @ Vmu
        tr_VSP = self.mu_inner(V, self.P) - VP
        tr_VSV = self.mu_inner(V, V) - VV
        s = jnp.sum(A, axis=0)
        per_k = (
            -jnp.sum(A * self.Qm, axis=0) * tr_VSP - s * VP + 0.5 * jnp.sum(A * A, axis=0) * tr_VSV + 0.5 * s**2 * VV
        )
        return 0.5 + self.mu @ per_k

    def examples(self) -> WeightedTable:
        """One training draw of §1, {"X": the T context tokens, "k": the last token, "y": the next token}, with
        probability Π_t μ_{x_t} · μ_k · (P X q_k)_y (the position s ~ q_k summed out: the loss does not see it): all
        N^{T+2} draws. ValueError above ``MAX_SEQUENCES`` of them, tiny instances only: the population loss is a
        closed form with no per-example terms (docs/models/scb.md, "Per-example data")."""
        N, T = self.N, self.T
        if N ** (T + 2) > MAX_SEQUENCES:
            raise ValueError(
                f"SparseBigram.examples(): one training example is a draw (x_1..x_{{T+1}}, y) of §1, and the exact "
                f"enumeration of its N^(T+2) = {N}^{T + 2} = {N ** (T + 2)} values at N={N}, T={T} exceeds the "
                f"limit of {MAX_SEQUENCES}; the population loss is a closed form with no per-example terms, so "
                "per-example data exist for tiny instances only (sample minibatches instead: per_sample_gradients)"
            )
        seqs, probs = sequence_table(self)
        X, k = seqs[:, :-1], seqs[:, -1]
        m = jnp.einsum("st,ist->si", self.Qm[:, k].T, self.P[:, X])  # m = P X q_k: the law of y
        points = {"X": jnp.repeat(X, N, axis=0), "k": jnp.repeat(k, N), "y": jnp.tile(jnp.arange(N), k.shape[0])}
        return WeightedTable(points, (probs[:, None] * m).reshape(-1))

    def example_loss(self, theta: Theta, x) -> Float[Array, ""]:
        """ℓ(θ, x) = ½‖e_y − V X a_k‖² of one draw x = {"X", "k", "y"} (the per-sample loss of §2), so that
        E_x ℓ(θ, x) = ``loss(θ)``.

        **Arguments:**

        - ``theta``: {"V": N × N, "A": T × N}.
        - ``x``: one draw, a point of ``examples()`` or of ``sample`` (X: (T,) tokens, k and y: tokens).
        """
        r, _ = draw_residual(self, theta, x["X"], x["k"], x["y"])
        return 0.5 * r @ r

    def init(self, key: Array | None) -> Theta:
        """The uninformative start V0 = μ1ᵀ (predicts the unigram μ), A0 = 11ᵀ/T (uniform attention), §4;
        ``key`` is unused. Its loss is ½(1 − ‖μ‖²)."""
        del key
        return {
            "V": jnp.broadcast_to(self.mu[:, None], (self.N, self.N)),
            "A": jnp.full((self.T, self.N), 1.0 / self.T),
        }

    def attractors(self):
        """The minimiser curve {(sP, Qm/s) : s ≠ 0} (§3) as "minimum": residual ‖V − sP‖_F + ‖A − Qm/s‖_F at
        s = ⟨V, P⟩_F/‖P‖_F² (zero exactly on the curve, +inf at s = 0)."""

        def minimum(theta):
            s = jnp.sum(theta["V"] * self.P) / jnp.sum(self.P**2)
            s_safe = jnp.where(s == 0, 1.0, s)
            r = jnp.linalg.norm(theta["V"] - s * self.P) + jnp.linalg.norm(theta["A"] - self.Qm / s_safe)
            return jnp.where(s == 0, jnp.inf, r)

        return {"minimum": minimum}

    # ---- the generative model (§1) -------------------------------------------------------------
    def sample(self, key: Array, batch: int) -> tuple[Int[Array, "B T"], Int[Array, " B"], Int[Array, " B"]]:
        """``batch`` exact draws (X, k, y) of §1: x_1..x_{T+1} i.i.d. μ, k = x_{T+1}, a position s ~ q_k and
        the next token y ~ p_{x_s}. X holds the T context tokens (not one-hot)."""
        return _sample(self, key, _validate.int_at_least("batch", batch, 1))


@eqx.filter_jit
def _sample(prob: SparseBigram, key: Array, batch: int):
    kx, ks, ky = jax.random.split(key, 3)
    tokens = jax.random.choice(kx, prob.N, (batch, prob.T + 1), p=prob.mu)
    X, k = tokens[:, :-1], tokens[:, -1]
    s = jax.random.categorical(ks, jnp.log(prob.Qm[:, k]).T, axis=-1)
    source = jnp.take_along_axis(X, s[:, None], axis=1)[:, 0]
    y = jax.random.categorical(ky, jnp.log(prob.P[:, source]).T, axis=-1)
    return X, k, y


class SoftmaxBigram(Problem):
    """Position-only softmax attention a_k = softmax(W e_k) over the T positions (docs/models/scb.md §3, Fig. 2);
    θ = {"V": N×N, "W": T×N logits}. The loss is ``SparseBigram``'s closed form at A = softmax(W).

    **Arguments:**

    - ``P``: the N × N column-stochastic transition matrix; ``Qm``: the T × N attention targets (columns in Δ_T),
      checked as by ``SparseBigram``.
    """

    linear: SparseBigram

    def __init__(self, P, Qm):
        self.linear = SparseBigram(P, Qm)

    def attention(self, theta: Theta) -> Float[Array, "T N"]:
        """A = softmax(W) column-wise: a_k = softmax(W e_k)."""
        return jax.nn.softmax(theta["W"], axis=0)

    def loss(self, theta: Theta) -> Float[Array, ""]:
        """L(V, softmax(W)) with L the linear-attention population loss (§3)."""
        return self.linear.loss({"V": theta["V"], "A": self.attention(theta)})

    def examples(self) -> WeightedTable:
        """The draws of ``SparseBigram.examples`` (the same data; ValueError above its size limit)."""
        return self.linear.examples()

    def example_loss(self, theta: Theta, x) -> Float[Array, ""]:
        """ℓ(θ, x) = ½‖e_y − V X a_k‖² at A = softmax(W) (``SparseBigram.example_loss``).

        **Arguments:**

        - ``theta``: {"V": N × N, "W": T × N}.
        - ``x``: one draw, a point of ``examples()``.
        """
        return self.linear.example_loss({"V": theta["V"], "A": self.attention(theta)}, x)

    def init(self, key: Array | None) -> Theta:
        """V0 = μ1ᵀ and W0 = 0 (uniform attention 11ᵀ/T): the linear model's uninformative start; ``key`` unused."""
        V0 = self.linear.init(key)["V"]
        return {"V": V0, "W": jnp.zeros((self.linear.T, self.linear.N))}
