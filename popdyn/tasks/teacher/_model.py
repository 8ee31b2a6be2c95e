"""Bilinear teacher σ(V* X S*) learned by position-only attention σ(W X S) and its exact population loss
(docs/models/teacher.md §1–§3, §6).

θ = {"W": M×d (W_V), "A": D×D (A = PᵀW_KQP, P = I w.l.o.g., §2.1)}, S = softmax(A/√D) column-wise.
With X_ab iid N(0, σ_x²) the entries of WXS and V*XS* are jointly Gaussian and only matched entries couple, so
L = L_opt + Σ_{m,j} l(a_mj, b_mj, c_mj) exactly (§3.2–§3.4), l the per-entry loss of ``kernels``.
"""

from __future__ import annotations

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from popdyn import _validate
from popdyn.exact._quadrature import MAX_NODES, GaussHermite, nodes_per_axis
from popdyn.exact._tables import WeightedTable
from popdyn.problem import Problem, Theta
from popdyn.tasks._leaves import concrete
from popdyn.tasks.teacher._kernels import ZERO_INITS, entry_loss, kappa, norm_toward, zero_partials

ACTIVATIONS = ("linear", "relu", "leaky")
"""The activations σ(z) = max(z, αz) a ``BilinearTeacher`` takes: α = 1 (linear), α = 0 (ReLU), α ∈ [0, 1) (leaky)."""
DEFAULT_LEAKY_ALPHA = 0.1
"""Leaky slope when none is given [our choice; the paper's is unknown, §1]."""
_EXAMPLE_DEGREE = 4
"""The total degree in (X, E) the per-example data integrate exactly: for the linear teacher a draw's gradient and
Hessian are quadratic in (X, E), so their second moments (the gradient noise, SGD's threshold) have degree 4."""


def validate_sizes(D, K) -> tuple[int, int]:
    """(D, K) as ints, checked: D ≥ 2 and 1 ≤ K < D (the theory needs K < D, §5.1); ValueError naming D or K.

    **Arguments:**

    - ``D``: the number of tokens; ``K``: the support of each column of S*.
    """
    D = _validate.int_at_least("D", D, 2)
    if isinstance(K, bool) or not isinstance(K, (int, np.integer)) or not 1 <= K < D:
        raise ValueError(f"K={K!r} is out of range: must be an integer in [1, D) = [1, {D})")
    return D, int(K)


def validate_teacher(S_star, V_star) -> tuple[np.ndarray, np.ndarray, int]:
    """(S*, V*, K): S* is D×D, D ≥ 2, with exactly K nonzeros equal to 1/K in every column, 1 ≤ K < D (§1, §5.1);
    V* is a finite, nonzero M×d matrix. ValueError naming S_star or V_star otherwise.

    **Arguments:**

    - ``S_star``: the teacher's attention S*, D × D.
    - ``V_star``: the teacher's value matrix V*, M × d.
    """
    S = _validate.float_array("S_star", S_star)
    if S.ndim != 2 or S.shape[0] != S.shape[1] or S.shape[0] < 2 or not np.all(np.isfinite(S)) or np.any(S < 0):
        raise ValueError(f"S_star with shape {S.shape} is invalid: must be a finite, nonnegative D×D matrix, D >= 2")
    counts = np.count_nonzero(S, axis=0)
    K = int(counts[0])
    if np.any(counts != K) or not 1 <= K < S.shape[0] or not np.allclose(S[S > 0], 1.0 / K, rtol=1e-12, atol=0):
        raise ValueError(
            f"S_star is invalid: every column must have the same number K of nonzero entries, "
            f"1 <= K < D = {S.shape[0]}, each equal to 1/K (column counts {counts.tolist()})"
        )
    V = _validate.float_array("V_star", V_star)
    if V.ndim != 2 or V.size == 0 or not np.all(np.isfinite(V)) or not np.any(V):
        raise ValueError(f"V_star with shape {V.shape} is invalid: must be a finite, nonzero 2-D M×d matrix")
    return S, V, K


def validate_settings(activation: str, alpha, sigma_x, sigma_eps, zero_init: str) -> tuple[float, float, float, str]:
    """(α, σ_x, σ_ε, zero_init) of a ``BilinearTeacher``, checked: the leaky slope of ``activation``
    (``resolve_alpha``), σ_x > 0, σ_ε >= 0 and a known zero-initialisation convention."""
    return (
        resolve_alpha(activation, alpha),
        _validate.positive("sigma_x", sigma_x),
        _validate.positive("sigma_eps", sigma_eps, allow_zero=True),
        _validate.choice("zero_init", zero_init, ZERO_INITS),
    )


def resolve_alpha(activation: str, alpha) -> float:
    """The leaky slope α of ``activation``: linear → 1, relu → 0, leaky → ``alpha`` (default 0.1) in [0, 1);
    ValueError for an unknown activation, an α out of range, or an α given with "linear" or "relu".

    **Arguments:**

    - ``activation``: one of ``ACTIVATIONS``.
    - ``alpha``: the leaky slope ("leaky" only; None: ``DEFAULT_LEAKY_ALPHA``).
    """
    _validate.choice("activation", activation, ACTIVATIONS)
    if activation != "leaky":
        if alpha is not None:
            raise ValueError(f"alpha={alpha!r} is invalid for activation={activation!r}: only 'leaky' takes alpha")
        return 1.0 if activation == "linear" else 0.0
    return _validate.half_open_unit("alpha", DEFAULT_LEAKY_ALPHA if alpha is None else alpha)


class BilinearTeacher(Problem):
    """Teacher f*(X) = σ(V* X S*) + noise and student σ(W X S), S = softmax(A/√D, axis=0) (§1–§2).

    ``activation`` ∈ {"linear", "relu", "leaky"} fixes α (1, 0, ``alpha``; default leaky slope 0.1 [our choice]).
    X_ab ~ N(0, σ_x²), noise N(0, σ_ε²) [our choice, §2]. ``zero_init`` is the convention for the derivative at
    w_m = 0, where ‖w_m‖ is not differentiable (§3.6, ``kernels.zero_partials``): "limit" (default) takes the
    one-sided limit along V* (the limit of ∇L(δV*) as δ → 0+); "c0=0"/"c0=1" the expectation form with
    relu'(0) = c0 (with "c0=0" ReLU GD never leaves W = 0). For the identity all three agree. α, σ_x and σ_ε are
    array leaves (the activation is kept only as α), so one compilation serves all their values; K and the
    convention are static.

    **Arguments:**

    - ``S_star``: the teacher's attention S*, D × D with K entries 1/K per column (``validate_teacher``).
    - ``V_star``: the teacher's value matrix V*, M × d, finite and nonzero.
    - ``activation``: one of ``ACTIVATIONS``; ``alpha``: the leaky slope ("leaky" only, ``resolve_alpha``).
    - ``sigma_x``: the std of the token entries (> 0); ``sigma_eps``: the label noise std (≥ 0).
    - ``zero_init``: the convention at w_m = 0, one of ``ZERO_INITS``.
    """

    S_star: Float[Array, "D D"]
    V_star: Float[Array, "M d"]
    alpha: Float[Array, ""]
    sigma_x: Float[Array, ""]
    sigma_eps: Float[Array, ""]
    K: int = eqx.field(static=True)
    zero_init: str = eqx.field(static=True)

    def __init__(
        self,
        S_star,
        V_star,
        activation: str = "leaky",
        alpha: float | None = None,
        sigma_x: float = 1.0,
        sigma_eps: float = 0.0,
        zero_init: str = "limit",
    ):
        S, V, self.K = validate_teacher(S_star, V_star)
        alpha, sigma_x, sigma_eps, self.zero_init = validate_settings(activation, alpha, sigma_x, sigma_eps, zero_init)
        self.alpha, self.sigma_x, self.sigma_eps = jnp.asarray(alpha), jnp.asarray(sigma_x), jnp.asarray(sigma_eps)
        self.S_star, self.V_star = jnp.asarray(S), jnp.asarray(V)

    # ---- sizes and scalars ----------------------------------------------------------------------
    @property
    def D(self) -> int:
        return self.S_star.shape[0]

    @property
    def M(self) -> int:
        return self.V_star.shape[0]

    @property
    def d(self) -> int:
        return self.V_star.shape[1]

    @property
    def v(self) -> Float[Array, ""]:
        """v = ‖V*‖_F²."""
        return jnp.sum(self.V_star**2)

    @property
    def L_opt(self) -> Float[Array, ""]:
        """L_opt = ½MDσ_ε², the irreducible loss (§2)."""
        return 0.5 * self.M * self.D * self.sigma_eps**2

    # ---- the model (§2) ----------------------------------------------------------------------------
    def attention(self, theta: Theta) -> Float[Array, "D D"]:
        """S = softmax(A/√D) over axis 0: column i is the attention of output position i (§2)."""
        return jax.nn.softmax(theta["A"] / math.sqrt(self.D), axis=0)

    def activate(self, z: Float[Array, "..."]) -> Float[Array, "..."]:
        """σ(z) = max(z, αz) (§1)."""
        return jnp.maximum(z, self.alpha * z)

    def student_output(self, theta: Theta, X: Float[Array, "*n d D"]) -> Float[Array, "*n M D"]:
        """σ(W X S)."""
        return self.activate(theta["W"] @ X @ self.attention(theta))

    def teacher_output(self, X: Float[Array, "*n d D"]) -> Float[Array, "*n M D"]:
        """f*(X) = σ(V* X S*) (noise-free)."""
        return self.activate(self.V_star @ X @ self.S_star)

    def logits(self, delta: float | Float[Array, ""]) -> Float[Array, "D D"]:
        """A(Δ) = C2 on the support of S*, −C3 off it, C2 = (D−K)Δ/D, C3 = KΔ/D: zero column sums (§4.1)."""
        return delta * ((self.S_star > 0) - self.K / self.D)

    def teacher_params(self, delta: float | None = None) -> Theta:
        """W = V*, A = ``logits(Δ)``; the default Δ = √D(40 + log D) makes (D−K)e^{−Δ/√D} < e^{−40}, so
        S = S* to float64 rounding (S* itself needs Δ → ∞, §4.1)."""
        delta = math.sqrt(self.D) * (40.0 + math.log(self.D)) if delta is None else delta
        return {"W": self.V_star, "A": self.logits(jnp.asarray(delta, dtype=jnp.result_type(float)))}

    # ---- the exact loss (§3) -------------------------------------------------------------------------
    def loss_at(self, W: Float[Array, "M d"], S: Float[Array, "D D"]) -> Float[Array, ""]:
        """L(W, S) = L_opt + Σ_{m,j} l(a, b, c) with a = σ_x‖w_m‖‖s_j‖, b = σ_x‖v*_m‖/√K,
        c = σ_x²⟨w_m, v*_m⟩⟨s_j, s*_j⟩ (§3.2–§3.4), as a function of S directly."""
        sx, V = self.sigma_x, self.V_star
        v_norm = jnp.linalg.norm(V, axis=1)
        towards = V / jnp.where(v_norm > 0, v_norm, 1.0)[:, None]  # direction of ‖w_m‖'s derivative at w_m = 0
        s_norm = jnp.linalg.norm(S, axis=0)
        overlap = jnp.sum(S * self.S_star, axis=0)  # ⟨s_j, s*_j⟩
        a = sx * norm_toward(W, towards)[:, None] * s_norm
        b = jnp.broadcast_to(sx * v_norm[:, None] / math.sqrt(self.K), a.shape)
        c = sx**2 * jnp.sum(W * V, axis=1)[:, None] * overlap
        rho = overlap * math.sqrt(self.K) / jnp.where(s_norm > 0, s_norm, 1.0)  # cos(s_j, s*_j): w_m ∥ v*_m at 0
        zero = zero_partials(self.zero_init, b, jnp.broadcast_to(rho, a.shape), self.alpha)
        return self.L_opt + jnp.sum(entry_loss(a, b, c, self.alpha, zero))

    @eqx.filter_jit
    def loss(self, theta: Theta) -> Float[Array, ""]:
        """The exact population loss ½E‖Y − σ(WXS)‖²_F = ``loss_at(W, softmax(A/√D))`` (§3.4); jitted, so eager
        calls (and eager vmaps of it) compile once instead of op by op."""
        return self.loss_at(theta["W"], self.attention(theta))

    def residual_loss(self, theta: Theta, X: Float[Array, "*n d D"], Y: Float[Array, "*n M D"]) -> Float[Array, "*n"]:
        """½‖Y − σ(WXS)‖²_F of each draw (X, Y): the per-sample loss (§2).

        **Arguments:**

        - ``theta``: {"W": M × d, "A": D × D}.
        - ``X``: token matrices (..., d, D); ``Y``: their labels (..., M, D).
        """
        return 0.5 * jnp.sum((Y - self.student_output(theta, X)) ** 2, axis=(-2, -1))

    def examples(self) -> WeightedTable:
        """One training draw of §2, {"X": d × D tokens, "E": M × D label noise}, for the linear teacher: the
        tensor-product Gauss–Hermite nodes of N(0, σ_x²) × N(0, σ_ε²) with 3 nodes per coordinate, exact for every
        polynomial in (X, E) of degree ≤ 5 per coordinate, hence for the loss, the gradient noise and SGD's
        threshold, whose integrands are of degree ≤ 4 (3^{D(d+M)} nodes, tiny sizes only). With ReLU or leaky ReLU
        the per-example loss is not polynomial and no exact rule exists: ValueError, as above the node limit
        (docs/models/teacher.md, "Per-example data")."""
        alpha = concrete(self.alpha)
        if isinstance(alpha, float) and alpha != 1.0:
            raise ValueError(
                f"BilinearTeacher.examples(): with activation slope alpha={alpha:g} (ReLU or leaky ReLU) the loss of "
                "one draw (X, E) is piecewise quadratic, not polynomial, so no Gauss-Hermite rule integrates its "
                "gradients' moments exactly, Gaussian draws have no finite enumeration, and the closed-form kernels of "
                "the population loss (§3) have no per-example terms: per-example data exist for the linear teacher "
                "(activation='linear') only"
            )
        dims, per_axis = self.D * (self.d + self.M), nodes_per_axis(_EXAMPLE_DEGREE)
        if per_axis**dims > MAX_NODES:
            fits = 0
            while per_axis ** (fits + 1) <= MAX_NODES:
                fits += 1
            raise ValueError(
                f"BilinearTeacher.examples(): one training draw (X, E) has D(d + M) = {dims} Gaussian coordinates at "
                f"D={self.D}, d={self.d}, M={self.M}, and its exact rule needs {per_axis}^{dims} = {per_axis**dims} "
                f"nodes, over the limit MAX_NODES = {MAX_NODES} (D(d + M) <= {fits}); the population loss needs no "
                "examples"
            )
        rule = GaussHermite(dims, _EXAMPLE_DEGREE)
        z = jnp.asarray(rule.nodes)
        X = self.sigma_x * z[:, : self.d * self.D].reshape(-1, self.d, self.D)
        E = self.sigma_eps * z[:, self.d * self.D :].reshape(-1, self.M, self.D)
        # a traced α (problems stacked or jitted) is not checked above: NaN weights then mark a non-linear teacher
        weights = jnp.where(self.alpha == 1.0, jnp.asarray(rule.weights, z.dtype), jnp.nan)
        return WeightedTable({"X": X, "E": E}, weights)

    def example_loss(self, theta: Theta, x) -> Float[Array, ""]:
        """ℓ(θ, x) = ½‖σ(V*XS*) + E − σ(WXS)‖²_F of one draw x = {"X", "E"} (``residual_loss``), so that
        E_x ℓ(θ, x) = ``loss(θ)``.

        **Arguments:**

        - ``theta``: {"W": M × d, "A": D × D}.
        - ``x``: one draw, a point of ``examples()``.
        """
        return self.residual_loss(theta, x["X"], self.teacher_output(x["X"]) + x["E"])

    def init(self, key: Array | None) -> Theta:
        """The paper's W = 0, A = 0 (S uniform, §2); ``key`` is unused."""
        del key
        return {"W": jnp.zeros((self.M, self.d)), "A": jnp.zeros((self.D, self.D))}

    def attractors(self):
        """ "teacher": ‖W − V*‖_F + ‖S − S*‖_F, zero only in the limit Δ → ∞ (no finite minimiser)."""
        return {
            "teacher": lambda t: (
                jnp.linalg.norm(t["W"] - self.V_star) + jnp.linalg.norm(self.attention(t) - self.S_star)
            )
        }

    def lambda_max_at_teacher(self) -> float:
        """λ_max of ∇²L in (W, A) at the teacher (W = V*, S → S*): κσ_x² max(D/K, v/(K²D)) (§6).

        There the Hessian is κ times the linear one, block-diagonal: the W block is σ_x²‖S*‖² = σ_x²D/K times the
        identity; the A block is σ_x²v JᵀJ, J the column-softmax Jacobian, whose norm² is 1/(K²D) for K ≥ 2 but 0 for
        K = 1 (one-hot columns), where λ_max = κσ_x²D [derived; the two-term max of §6 assumes K ≥ 2]."""
        a_block = float(self.v) / (self.K**2 * self.D) if self.K >= 2 else 0.0
        return kappa(float(self.alpha)) * float(self.sigma_x) ** 2 * max(self.D / self.K, a_block)

    # ---- the generative model (§2) -----------------------------------------------------------------
    def sample(self, key: Array, n: int) -> tuple[Float[Array, "n d D"], Float[Array, "n M D"]]:
        """``n`` draws (X, Y): X_ab ~ N(0, σ_x²), Y = σ(V* X S*) + E, E_mi ~ N(0, σ_ε²) (§2)."""
        n = _validate.int_at_least("n", n, 1)
        kx, ke = jax.random.split(key)
        X = self.sigma_x * jax.random.normal(kx, (n, self.d, self.D))
        return X, self.teacher_output(X) + self.sigma_eps * jax.random.normal(ke, (n, self.M, self.D))

    def sampled_loss(self, theta: Theta, key: Array, n: int) -> tuple[Float[Array, ""], Float[Array, ""]]:
        """Monte Carlo (estimate, standard error) of L(θ) from ``n`` ≥ 2 draws of ``sample``."""
        return _sampled_loss(self, theta, key, _validate.int_at_least("n", n, 2))


@eqx.filter_jit
def _sampled_loss(prob: BilinearTeacher, theta: Theta, key: Array, n: int):
    X, Y = prob.sample(key, n)
    per = prob.residual_loss(theta, X, Y)
    return jnp.mean(per), jnp.std(per, ddof=1) / math.sqrt(n)
