"""The reduced systems of docs/models/scb.md §4: the projected 2-D manifold 𝓜 and the unprojected 4-D family.

𝓜 = {V = μ1ᵀ + α_V(P − μ1ᵀ), A = 11ᵀ/T + α_A(Qm − 11ᵀ/T)} is invariant under projected preconditioned
GD; {V = α_V P + β_V μ1ᵀ, a_k = α_A q_k + β_A 1} is invariant without the projection. Both are Problems
in their coordinates, with the loss of the full model restricted to them (L* included) and a
``precondition`` (the inverse μ-metric Gram matrix G^{-1} of the coordinates) such that
θ ← θ − η·precondition(∇ℓ) is exactly full-matrix preconditioned GD.
"""

from __future__ import annotations

import math

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from popdyn import _validate
from popdyn.problem import Overlay, Problem, Theta
from popdyn.tasks._leaves import all_float, floats, leaf
from popdyn.tasks.scb._model import SparseBigram

_ROUNDING = 1e-12


def _scalars(c, qbar, T, mu_sq) -> tuple[float, float, int, float]:
    """Validate (c, q̄, T, ‖μ‖²): c > 0, T ≥ 2, 1/T < q̄ ≤ 1, 0 < ‖μ‖² ≤ 1 (so G is invertible); the upper
    bounds allow 1e-12 of rounding, as q̄ = 1 of an instance with Q = 1 is a sum of floats. 0-d arrays count as
    numbers, strings do not."""
    c, qbar, mu_sq = (float(v) if hasattr(v, "dtype") and np.ndim(v) == 0 else v for v in (c, qbar, mu_sq))
    c = _validate.positive("c", c)
    T = _validate.int_at_least("T", T, 2)
    qbar = _validate.finite("qbar", qbar)
    if not (1.0 / T < qbar <= 1.0 + _ROUNDING):
        raise ValueError(
            f"qbar={qbar!r} is out of range: must lie in (1/T, 1] = ({1.0 / T:g}, 1] "
            "(qbar = 1/T is uniform attention, where alpha_A is undefined)"
        )
    mu_sq = _validate.finite("mu_sq", mu_sq)
    if not (0.0 < mu_sq <= 1.0 + _ROUNDING):
        raise ValueError(f"mu_sq={mu_sq!r} is out of range: must lie in (0, 1]")
    return c, qbar, T, mu_sq


class _Reduced(Problem):
    """The scalars (c, q̄, T, ‖μ‖²) a reduced SCB system depends on (docs/models/scb.md §4). c, q̄ and ‖μ‖² are 0-d array
    leaves (a new value compiles nothing; systems of one T stack and vmap); T is static. The closed forms for
    reports (``L_star``, ``saddle()``, ``eigenvalues_at_minimum()``) are Python floats outside transformations."""

    c: Float[Array, ""]
    qbar: Float[Array, ""]
    mu_sq: Float[Array, ""]
    T: int = eqx.field(static=True)

    def __init__(self, c: float, qbar: float, T: int, mu_sq: float):
        c, qbar, self.T, mu_sq = _scalars(c, qbar, T, mu_sq)
        self.c, self.qbar, self.mu_sq = leaf(c), leaf(qbar), leaf(mu_sq)

    @classmethod
    def from_instance(cls, prob: SparseBigram):
        """The reduced system of an instance: (c, q̄, T, ‖μ‖²) of ``prob``."""
        return cls(float(prob.c), float(prob.qbar), prob.T, float(prob.mu_sq))


class Reduced2D(_Reduced):
    """Projected preconditioned dynamics on 𝓜, θ = {"alpha_V", "alpha_A"} (docs/models/scb.md §4).

    ℓ(α) = L* + (c/2)[(q̄ − 1/T)(1 − α_Vα_A)² + (1 − α_V)²/T], g(α) = −G^{-1}∇ℓ with G = diag(c, q̄ − 1/T).

    **Arguments:**

    - ``c``, ``qbar``, ``mu_sq``: the instance's scalars c, q̄ and ‖μ‖² (§3; ``from_instance`` reads them from a
      ``SparseBigram``).
    - ``T``: the context length.
    """

    @property
    def L_star(self) -> float:
        """L* = ½(1 − ‖μ‖² − q̄c) (§3)."""
        c, qbar, mu_sq = floats(self.c, self.qbar, self.mu_sq)
        return 0.5 * (1.0 - mu_sq - qbar * c)

    def loss(self, theta: Theta) -> Float[Array, ""]:
        """ℓ(α) = L* + (c/2)[(q̄ − 1/T)(1 − α_Vα_A)² + (1 − α_V)²/T]: the full loss on 𝓜 (§4)."""
        aV, aA = theta["alpha_V"], theta["alpha_A"]
        qd = self.qbar - 1.0 / self.T
        return self.L_star + 0.5 * self.c * (qd * (1.0 - aV * aA) ** 2 + (1.0 - aV) ** 2 / self.T)

    def velocity(self, theta: Theta) -> Theta:
        """g(α): g_V = (q̄ − 1/T)α_A(1 − α_Vα_A) + (1 − α_V)/T, g_A = cα_V(1 − α_Vα_A); α̇ = g is the flow (§4)."""
        aV, aA = theta["alpha_V"], theta["alpha_A"]
        gap = 1.0 - aV * aA
        return {"alpha_V": (self.qbar - 1.0 / self.T) * aA * gap + (1.0 - aV) / self.T, "alpha_A": self.c * aV * gap}

    def precondition(self, grad: Theta) -> Theta:
        """G^{-1}∇ℓ with G = diag(c, q̄ − 1/T), the μ-metric on 𝓜; at ∇ℓ it equals −g(α) (§4)."""
        return {"alpha_V": grad["alpha_V"] / self.c, "alpha_A": grad["alpha_A"] / (self.qbar - 1.0 / self.T)}

    def step(self, theta: Theta, eta: float) -> Theta:
        """One population GD step α ← α + η g(α) (§4)."""
        g = self.velocity(theta)
        return {name: theta[name] + eta * g[name] for name in theta}

    def init(self, key: Array | None) -> Theta:
        """α = (0, 0): the uninformative start (μ1ᵀ, 11ᵀ/T); ``key`` unused."""
        del key
        return {"alpha_V": jnp.zeros(()), "alpha_A": jnp.zeros(())}

    def saddle(self) -> tuple[float, float]:
        """The saddle (0, −1/(Tq̄ − 1)) of the projected flow, det J = −c(q̄ − 1/T) < 0 (§4)."""
        (qbar,) = floats(self.qbar)
        return 0.0, -1.0 / (self.T * qbar - 1.0)

    def eigenvalues_at_minimum(self) -> tuple[float, float]:
        """(λ_slow, λ_fast) of G^{-1}∇²ℓ at (1, 1): the roots of λ² − (q̄ + c)λ + c/T = 0 (§4); λ_slow via
        the product of the roots, free of cancellation."""
        c, qbar = floats(self.c, self.qbar)
        b = qbar + c
        fast = 0.5 * (b + (math if all_float((c, qbar)) else jnp).sqrt(b * b - 4.0 * c / self.T))
        return c / (self.T * fast), fast

    def attractors(self):
        """Distances to the minimum (1, 1) ("minimum") and to the saddle ("saddle") (§4)."""
        sV, sA = self.saddle()
        return {
            "minimum": lambda t: jnp.hypot(t["alpha_V"] - 1.0, t["alpha_A"] - 1.0),
            "saddle": lambda t: jnp.hypot(t["alpha_V"] - sV, t["alpha_A"] - sA),
        }

    def overlays(self, x_axis: str, y_axis: str, x_range: tuple[float, float]) -> list[Overlay]:
        """The hyperbola α_Vα_A = 1 (a valley of ℓ containing the minimum), the minimum (1, 1) and the
        saddle, on the (alpha_V, alpha_A) plane in either order (§4)."""
        if {x_axis, y_axis} != {"alpha_V", "alpha_A"}:
            return []
        x = np.linspace(*x_range, 801)
        x = np.where(np.abs(x) < 1e-12, np.nan, x)  # break the two branches at 0
        swap = x_axis == "alpha_A"
        sV, sA = self.saddle()
        mark = {"color": "k", "marker": "x", "s": 60}
        pt = (lambda v, a: ((a,), (v,))) if swap else (lambda v, a: ((v,), (a,)))
        return [
            Overlay("α_V α_A = 1", "line", tuple(x), tuple(1.0 / x), {"color": "k", "ls": "--", "lw": 1.2}),
            Overlay("minimum (1, 1)", "points", *pt(1.0, 1.0), {"color": "k", "marker": "*", "s": 80}),
            Overlay("saddle", "points", *pt(sV, sA), mark),
        ]


class Reduced4D(_Reduced):
    """Unprojected preconditioned dynamics on V = α_V P + β_V μ1ᵀ, a_k = α_A q_k + β_A 1 (docs/models/scb.md §4);
    θ = {"alpha_V", "beta_V", "alpha_A", "beta_A"}.

    With s_V = α_V + β_V, s_A = α_A + Tβ_A, m_1 = α_A q̄ + β_A, m_2 = α_A² q̄ + 2α_Aβ_A + Tβ_A²:
    ℓ = ½ − c α_V m_1 − ‖μ‖² s_V s_A + ½ c α_V² m_2 + ½ ‖μ‖² s_V² s_A².

    **Arguments:**

    - ``c``, ``qbar``, ``mu_sq``: the instance's scalars c, q̄ and ‖μ‖² (§3; ``from_instance`` reads them from a
      ``SparseBigram``).
    - ``T``: the context length.
    """

    def _moments(self, theta: Theta):
        aV, bV, aA, bA = theta["alpha_V"], theta["beta_V"], theta["alpha_A"], theta["beta_A"]
        s_V, s_A = aV + bV, aA + self.T * bA
        m1 = aA * self.qbar + bA
        m2 = aA**2 * self.qbar + 2.0 * aA * bA + self.T * bA**2
        return s_V, s_A, m1, m2

    def loss(self, theta: Theta) -> Float[Array, ""]:
        """The full loss on the family: ½ − cα_V m_1 − ‖μ‖² s_V s_A + ½cα_V² m_2 + ½‖μ‖² s_V² s_A² (§3 at V, A)."""
        aV = theta["alpha_V"]
        s_V, s_A, m1, m2 = self._moments(theta)
        return (
            0.5
            - self.c * aV * m1
            - self.mu_sq * s_V * s_A
            + 0.5 * self.c * aV**2 * m2
            + 0.5 * self.mu_sq * (s_V * s_A) ** 2
        )

    def precondition(self, grad: Theta) -> Theta:
        """G^{-1}∇ℓ, G the μ-Gram matrix of the tangents (P, μ1ᵀ | Qm, 11ᵀ):
        G_V = [[c + ‖μ‖², ‖μ‖²], [‖μ‖², ‖μ‖²]], G_A = [[q̄, 1], [1, T]]."""
        gaV, gbV, gaA, gbA = grad["alpha_V"], grad["beta_V"], grad["alpha_A"], grad["beta_A"]
        det_A = self.T * self.qbar - 1.0
        return {
            "alpha_V": (gaV - gbV) / self.c,
            "beta_V": (-gaV + gbV) / self.c + gbV / self.mu_sq,
            "alpha_A": (self.T * gaA - gbA) / det_A,
            "beta_A": (-gaA + self.qbar * gbA) / det_A,
        }

    def step(self, theta: Theta, eta: float) -> Theta:
        """The explicit one-step map of §4:
        α_V ← α_V − η(α_V m_2 − m_1),  β_V ← β_V + η(α_V m_2 − m_1) − η(s_A² s_V − s_A),
        α_A ← α_A − ηcα_V(α_Vα_A − 1),  β_A ← β_A − η[cα_V²β_A + ‖μ‖² s_V(s_V s_A − 1)]."""
        aV, bV, aA, bA = theta["alpha_V"], theta["beta_V"], theta["alpha_A"], theta["beta_A"]
        s_V, s_A, m1, m2 = self._moments(theta)
        dV = aV * m2 - m1
        return {
            "alpha_V": aV - eta * dV,
            "beta_V": bV + eta * dV - eta * (s_A**2 * s_V - s_A),
            "alpha_A": aA - eta * self.c * aV * (aV * aA - 1.0),
            "beta_A": bA - eta * (self.c * aV**2 * bA + self.mu_sq * s_V * (s_V * s_A - 1.0)),
        }

    def init(self, key: Array | None) -> Theta:
        """The uninformative start (μ1ᵀ, 11ᵀ/T): (α_V, β_V, α_A, β_A) = (0, 1, 0, 1/T); ``key`` unused."""
        del key
        z = jnp.zeros(())
        return {"alpha_V": z, "beta_V": z + 1.0, "alpha_A": z, "beta_A": z + 1.0 / self.T}


def embed_2d(prob: SparseBigram, theta: Theta) -> Theta:
    """The point of 𝓜: V = μ1ᵀ + α_V(P − μ1ᵀ), A = 11ᵀ/T + α_A(Qm − 11ᵀ/T) (§4): a ``Reduced2D`` state as the
    full model's θ, so the full loss and metrics can be read there.

    **Arguments:**

    - ``prob``: the ``SparseBigram`` instance (P, Qm, μ, T).
    - ``theta``: the reduced state {"alpha_V", "alpha_A"}.

    Returns the full θ = {"V", "A"}.
    """
    mu1 = prob.mu[:, None] * jnp.ones(prob.N)
    return {
        "V": mu1 + theta["alpha_V"] * (prob.P - mu1),
        "A": 1.0 / prob.T + theta["alpha_A"] * (prob.Qm - 1.0 / prob.T),
    }


def embed_4d(prob: SparseBigram, theta: Theta) -> Theta:
    """The point of the 4-D family: V = α_V P + β_V μ1ᵀ, A = α_A Qm + β_A 11ᵀ (§4): a ``Reduced4D`` state as the
    full model's θ.

    **Arguments:**

    - ``prob``: the ``SparseBigram`` instance (P, Qm, μ).
    - ``theta``: the reduced state {"alpha_V", "beta_V", "alpha_A", "beta_A"}.

    Returns the full θ = {"V", "A"}.
    """
    return {
        "V": theta["alpha_V"] * prob.P + theta["beta_V"] * prob.mu[:, None] * jnp.ones(prob.N),
        "A": theta["alpha_A"] * prob.Qm + theta["beta_A"],
    }
