"""The exact reduced 2-D system of the bilinear teacher from zero initialisation (docs/models/teacher.md §4, §5.2).

On the invariant manifold W = C1 V*, A = C2 on the support of S*, −C3 off it (KC2 = (D−K)C3, Δ = C2 + C3),
S is p on the support and q off it, p = 1/(K + (D−K)e^{−Δ/√D}), q = (1 − Kp)/(D−K), and
Lr(C1, Δ) = L_opt + v·D·l(σ_x|C1|n, σ_x/√K, σ_x²C1 p), n² = Kp² + (D−K)q² (§4.2). Full-matrix GD from zero is
exactly GD on (C1, Δ) in the metric diag(v, K(D−K)) (``precondition``).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, Float

from popdyn import _validate
from popdyn.problem import Problem, Theta
from popdyn.tasks.teacher._kernels import ZERO_INITS, entry_loss, kappa, norm_toward, zero_partials
from popdyn.tasks.teacher._model import BilinearTeacher, validate_sizes


class TeacherErrors(NamedTuple):
    """The distances to the teacher on the manifold (§4.1, ``TeacherReduced.errors``): ``eps`` = ε = 1 − Kp, the
    attention off the support of S*; ``w_error`` = ‖W − V*‖_F; ``s_error`` = ‖S − S*‖_F."""

    eps: Float[Array, "..."]
    w_error: Float[Array, "..."]
    s_error: Float[Array, "..."]


class LateAsymptotes(NamedTuple):
    """The late-time forms at flow time t = ηT (§5.2 [derived], ``TeacherReduced.asymptotics``): ``excess``
    L − L_opt ~ KD(D−K)/(4t); ``eps`` ε ~ √(K(D−K)²/(2κσ_x²vt)); ``w_error`` ‖W − V*‖ ~ √K(D−K)/(σ_x√(2κt));
    ``s_error`` ‖S − S*‖ ~ D√(D−K)/(σ_x√v√(2κt))."""

    excess: float
    eps: float
    w_error: float
    s_error: float


def late_constant(D: int, K: int) -> float:
    """lim ηT(L − L_opt) = KD(D−K)/4 (§5.2 [derived]): the same for every α, V*, M, d and σ_x, so the excess loss
    of GD from zero decays like KD(D−K)/(4ηT).

    **Arguments:**

    - ``D``: the number of tokens; ``K``: the support of each column of S* (1 ≤ K < D).
    """
    D, K = validate_sizes(D, K)
    return K * D * (D - K) / 4.0


class TeacherReduced(Problem):
    """Lr(C1, Δ) of §4.2 as a Problem, θ = {"C1": scalar, "Delta": scalar}; α ∈ [0, 1] (1 = identity).

    Depends on the teacher only through (D, K, v = ‖V*‖², α, σ_x) and L_opt = ½MDσ_ε². ``zero_init`` is the
    convention at C1 = 0 of ``BilinearTeacher`` ("limit": the one-sided limit C1 → 0+). v, α, σ_x and σ_ε are array
    leaves (one compilation serves all their values); sizes and the convention are static.

    **Arguments:**

    - ``D``: the number of tokens; ``K``: the support of each column of S* (1 ≤ K < D).
    - ``v``: v = ‖V*‖_F² > 0; ``alpha``: the leaky slope α ∈ [0, 1] (1 = identity).
    - ``sigma_x``: the std of the token entries (> 0); ``sigma_eps``: the label noise std (≥ 0).
    - ``M``: the teacher's output channels (enters L_opt only); ``zero_init``: one of ``ZERO_INITS``.
    """

    v: Float[Array, ""]
    alpha: Float[Array, ""]
    sigma_x: Float[Array, ""]
    sigma_eps: Float[Array, ""]
    D: int = eqx.field(static=True)
    K: int = eqx.field(static=True)
    M: int = eqx.field(static=True)
    zero_init: str = eqx.field(static=True)

    def __init__(
        self,
        D: int,
        K: int,
        v: float,
        alpha: float,
        sigma_x: float = 1.0,
        sigma_eps: float = 0.0,
        *,
        M: int = 1,
        zero_init: str = "limit",
    ):
        self.D, self.K = validate_sizes(D, K)
        self.v = jnp.asarray(_validate.positive("v", v))
        if not 0.0 <= _validate.finite("alpha", alpha) <= 1.0:
            raise ValueError(f"alpha={alpha!r} is out of range: must lie in [0, 1] (1 = identity)")
        self.alpha = jnp.asarray(float(alpha))
        self.sigma_x = jnp.asarray(_validate.positive("sigma_x", sigma_x))
        self.sigma_eps = jnp.asarray(_validate.positive("sigma_eps", sigma_eps, allow_zero=True))
        self.M = _validate.int_at_least("M", M, 1)
        self.zero_init = _validate.choice("zero_init", zero_init, ZERO_INITS)

    @classmethod
    def from_teacher(cls, teacher: BilinearTeacher) -> TeacherReduced:
        """The reduced system of a full teacher problem (same α, σ_x, σ_ε, M and zero-init convention)."""
        return cls(
            teacher.D,
            teacher.K,
            float(teacher.v),
            float(teacher.alpha),
            float(teacher.sigma_x),
            float(teacher.sigma_eps),
            M=teacher.M,
            zero_init=teacher.zero_init,
        )

    @property
    def L_opt(self) -> Float[Array, ""]:
        """L_opt = ½MDσ_ε² (§2)."""
        return 0.5 * self.M * self.D * self.sigma_eps**2

    def attention_values(self, delta: Float[Array, "..."]) -> tuple[Float[Array, "..."], Float[Array, "..."]]:
        """(p, q) = (1/(K + (D−K)e^{−x}), p e^{−x}), x = Δ/√D, in log form (no overflow for any Δ) (§4.1)."""
        x = delta / math.sqrt(self.D)
        log_p = -jnp.logaddexp(math.log(self.K), math.log(self.D - self.K) - x)
        return jnp.exp(log_p), jnp.exp(log_p - x)

    @eqx.filter_jit
    def loss(self, theta: Theta) -> Float[Array, ""]:
        """Lr = L_opt + vD·l(σ_x|C1|n, σ_x/√K, σ_x²C1p) (§4.2); at C1 = 0 the derivative follows ``zero_init``
        with cos(s_j, s*_j) = √K p/n. Jitted (eager calls compile once)."""
        C1, sx = theta["C1"], self.sigma_x
        p, q = self.attention_values(theta["Delta"])
        n = jnp.sqrt(self.K * p**2 + (self.D - self.K) * q**2)
        a = sx * n * norm_toward(C1[None], jnp.ones(1))  # derivative +σ_x n at C1 = 0: the direction of V*
        b = sx / math.sqrt(self.K)
        zero = zero_partials(self.zero_init, b, math.sqrt(self.K) * p / n, self.alpha)
        return self.L_opt + self.v * self.D * entry_loss(a, b, sx**2 * C1 * p, self.alpha, zero)

    def precondition(self, grad: Theta) -> Theta:
        """(∂Lr/∂C1 / v, ∂Lr/∂Δ / (K(D−K))): θ ← θ − η·precondition(∇Lr) is full-matrix GD (GF with η → dt), as
        ‖V*‖² = v and ‖∂A/∂Δ‖² = K(D−K) (§4.2)."""
        return {"C1": grad["C1"] / self.v, "Delta": grad["Delta"] / (self.K * (self.D - self.K))}

    def init(self, key: Array | None) -> Theta:
        """C1 = Δ = 0 (W = 0, A = 0); ``key`` is unused."""
        del key
        return {"C1": jnp.zeros(()), "Delta": jnp.zeros(())}

    def errors(self, theta: Theta) -> TeacherErrors:
        """ε = 1 − Kp, ‖W − V*‖_F = |C1 − 1|√v and ‖S − S*‖_F = Dε/√(K(D−K)) at θ = (C1, Δ) (§4.1)."""
        q = self.attention_values(theta["Delta"])[1]
        eps = (self.D - self.K) * q  # = 1 − Kp without cancellation
        return TeacherErrors(
            eps=eps,
            w_error=jnp.abs(theta["C1"] - 1.0) * jnp.sqrt(self.v),
            s_error=self.D * eps / math.sqrt(self.K * (self.D - self.K)),
        )

    def attractors(self):
        """ "teacher": ‖W − V*‖_F + ‖S − S*‖_F, zero only in the limit Δ → ∞."""

        def teacher(theta: Theta) -> Float[Array, ""]:
            e = self.errors(theta)
            return e.w_error + e.s_error

        return {"teacher": teacher}

    def asymptotics(self, t: float) -> LateAsymptotes:
        """The late-time forms of L − L_opt, ε, ‖W − V*‖ and ‖S − S*‖ at flow time ``t`` = ηT (§5.2 [derived]), as
        ``LateAsymptotes``; valid once t ≫ ``late_onset()``."""
        k2t = 2.0 * kappa(float(self.alpha)) * float(self.sigma_x) ** 2 * t
        D, K, v = self.D, self.K, float(self.v)
        return LateAsymptotes(
            excess=late_constant(D, K) / t,
            eps=math.sqrt(K * (D - K) ** 2 / (k2t * v)),
            w_error=math.sqrt(K / k2t) * (D - K),
            s_error=D * math.sqrt((D - K) / (k2t * v)),
        )

    def late_onset(self) -> float:
        """(D−K)⁴/(2κσ_x²vK): the flow time after which the 1/t regime sets in (ε < K/(D−K), §5.2)."""
        k2 = 2.0 * kappa(float(self.alpha)) * float(self.sigma_x) ** 2
        return (self.D - self.K) ** 4 / (k2 * float(self.v) * self.K)


def embed(teacher: BilinearTeacher, theta: Theta) -> Theta:
    """The full θ of (C1, Δ): W = C1 V*, A = ``teacher.logits(Δ)`` (C2 = (D−K)Δ/D on the support, −KΔ/D off): a
    point of the invariant manifold of §4.1 as the full model's parameters; ``project`` inverts it there.

    **Arguments:**

    - ``teacher``: the ``BilinearTeacher``.
    - ``theta``: the reduced state {"C1", "Delta"}.
    """
    return {"W": theta["C1"] * teacher.V_star, "A": teacher.logits(theta["Delta"])}


def project(teacher: BilinearTeacher, theta: Theta) -> Theta:
    """(C1, Δ) of a full θ: C1 = ⟨W, V*⟩/v, Δ = ⟨A, B⟩/(K(D−K)) with B = ∂A/∂Δ (exact on the manifold of §4.1,
    the orthogonal projection onto the directions V* and B off it).

    **Arguments:**

    - ``teacher``: the ``BilinearTeacher``.
    - ``theta``: the full state {"W": M × d, "A": D × D}.
    """
    B = teacher.logits(1.0)
    return {
        "C1": jnp.sum(theta["W"] * teacher.V_star) / teacher.v,
        "Delta": jnp.sum(theta["A"] * B) / (teacher.K * (teacher.D - teacher.K)),
    }
