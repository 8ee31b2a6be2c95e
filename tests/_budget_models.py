"""User models for the tests of runs that ran out of budget (tests/test_budget.py), importable as
``_budget_models`` (tests/ on the path) and on the command line as ``_budget_models:bowl``.

* ``scm``: the soft committee machine, a two-layer network of K erf units learning a teacher of M erf units from
  Gaussian inputs x ~ N(0, I_N): the student's output Σ_k g(w_k·x/√N), the teacher's Σ_m g(b_m·x/√N),
  g(u) = erf(u/√2), and the exact population loss ε = ½E[(student − teacher)²] from the order parameters
  Q = WWᵀ/N, R = WBᵀ/N, T = BBᵀ/N (Saad & Solla): E[g(u)g(v)] = (2/π) arcsin(C_uv/√((1 + C_uu)(1 + C_vv))) for
  jointly Gaussian fields of covariance C.
  From small random weights the flow learns the teacher's mean direction first and sits on the symmetric plateau
  until the units specialise, at flow times of order N.
* ``bowl``: L = ½λ‖θ‖², θ ∈ ℝ², whose flow relaxes at the rate λ.
"""

import jax.numpy as jnp
import numpy as np

import popdyn


def scm_loss(theta, data):
    """ε(W) = ½ sᵀ G s in closed form: G_ab = E[g(u_a)g(u_b)] over the K + M fields u = (W; B)x/√N, whose
    covariance is C = (W; B)(W; B)ᵀ/N, and s = (1, …, 1, −1, …, −1) (students +, teachers −)."""
    W, B = theta["W"], data["B"]
    V = jnp.concatenate([W, B])
    C = V @ V.T / W.shape[1]
    d = 1.0 + jnp.diag(C)
    G = (2.0 / jnp.pi) * jnp.arcsin(C / jnp.sqrt(d[:, None] * d[None, :]))
    s = jnp.concatenate([jnp.ones(W.shape[0]), -jnp.ones(B.shape[0])])
    return 0.5 * s @ G @ s


def teacher(n: int, m: int) -> np.ndarray:
    """M orthogonal teacher vectors of norm √N (T = I), from a fixed rotation."""
    q = np.linalg.qr(np.random.default_rng(1).standard_normal((n, m)))[0]
    return np.sqrt(n) * q.T


def scm(n: int = 50, k: int = 2, m: int = 2, init_scale: float = 0.1):
    """The soft committee machine of K students and M teachers in dimension N, weights drawn N(0, init_scale²)."""
    return popdyn.Problem.from_loss(scm_loss, {"W": np.zeros((k, n))}, data={"B": teacher(n, m)}, init_scale=init_scale)


def bowl_loss(theta, data):
    return 0.5 * data["lam"] * jnp.sum(theta["x"] ** 2)


def bowl(lam: float = 0.01):
    """L = ½λ‖θ‖² on θ = x ∈ ℝ², starts drawn N(0, 1)."""
    return popdyn.Problem.from_loss(bowl_loss, {"x": np.zeros(2)}, data={"lam": lam}, init_scale=1.0)
