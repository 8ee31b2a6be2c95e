"""Hessian curvature of the exact population loss: exact spectra and Lanczos extremes (re-exported by
``popdyn.analysis``; below ``popdyn.dynamics`` so its stopping tests and saddle checks use it too).

For small problems the Hessian of L on the flattened parameter vector is formed exactly,
symmetrised, and diagonalised (eigvalsh). For large ones, Lanczos with full reorthogonalisation on
Hessian-vector products (forward-over-reverse) gives the extreme Ritz values. Eigenvalues are signed
(algebraic): at a saddle λ_min < 0 and λ_max is the largest algebraic eigenvalue, never |λ|.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree
from jaxtyping import Array, Float

from popdyn._batching import as_batch, unbatch
from popdyn.problem import Problem, Theta, ThetaLike

EXACT_MAX_DIM = 512
"""``method="auto"`` forms the full Hessian up to this many parameters, else uses Lanczos."""


def _flat_loss(prob: Problem, theta: Theta):
    flat, unravel = ravel_pytree(theta)
    return (lambda x: prob.loss(unravel(x))), flat


def hessian_matrix(prob: Problem, theta: ThetaLike) -> Float[Array, "n n"]:
    """∇²L at one θ on the flattened parameters, symmetrised: (H + Hᵀ)/2."""
    f, x = _flat_loss(prob, theta)
    H = jax.hessian(f)(x)
    return 0.5 * (H + H.T)


def _spectrum_one(prob, theta):
    return jnp.linalg.eigvalsh(hessian_matrix(prob, theta))


@eqx.filter_jit
def _spectra(prob: Problem, batch: Theta) -> Array:
    return jax.vmap(lambda t: _spectrum_one(prob, t))(batch)


def hessian_spectrum(prob: Problem, theta: ThetaLike) -> Float[Array, "*B n"]:
    """All Hessian eigenvalues, ascending; θ may carry a batch axis."""
    batch, batched = as_batch(prob, theta)
    return unbatch(_spectra(prob, batch), batched)


def _lanczos(hvp, v0: Array, k: int) -> tuple[Array, Array, Array]:
    """(V, α, β): ``k`` Lanczos steps with full reorthogonalisation from the unit vector ``v0``, ``hvp`` the
    Hessian-vector product; the rows of V are the orthonormal basis, α and β the diagonal and off-diagonal of the
    tridiagonal T = VᵀHV. After a breakdown (an invariant subspace is found) the remaining diagonal entries are
    filled with α_1, a Rayleigh quotient, so they can never become a spurious extreme, and the basis rows are 0."""
    n = v0.shape[0]
    V = jnp.zeros((k + 1, n), v0.dtype).at[0].set(v0)
    alphas = jnp.zeros(k, v0.dtype)
    betas = jnp.zeros(k, v0.dtype)
    scale = jnp.zeros((), v0.dtype)

    def body(j, state):
        V, alphas, betas, alive, scale = state
        w = hvp(V[j])
        a = jnp.vdot(V[j], w)
        w = w - V.T @ (V @ w)  # full reorthogonalisation (twice, for stability)
        w = w - V.T @ (V @ w)
        b = jnp.linalg.norm(w)
        scale = jnp.maximum(scale, jnp.abs(a) + b)
        alphas = alphas.at[j].set(jnp.where(alive, a, alphas[0]))
        still = alive & (b > 1e-12 * jnp.maximum(scale, 1e-300))
        betas = betas.at[j].set(jnp.where(still, b, 0.0))
        V = V.at[j + 1].set(jnp.where(still, w / jnp.where(b > 0, b, 1.0), 0.0))
        return V, alphas, betas, still, scale

    V, alphas, betas, _, _ = jax.lax.fori_loop(0, k, body, (V, alphas, betas, jnp.bool_(True), scale))
    return V, alphas, betas


def _tridiagonal(alphas: Array, betas: Array) -> Array:
    return jnp.diag(alphas) + jnp.diag(betas[:-1], 1) + jnp.diag(betas[:-1], -1)


def _hvp(prob: Problem, theta: Theta):
    """(The Hessian-vector product v ↦ ∇²L(θ)v on the flattened parameters, θ flattened)."""
    f, x = _flat_loss(prob, theta)
    grad = jax.grad(f)
    return (lambda v: jax.jvp(grad, (x,), (v,))[1]), x


def lanczos_extremes(prob: Problem, theta: ThetaLike, iters: int = 64, seed: int = 0) -> tuple[Array, Array]:
    """(λ_min, λ_max) Ritz estimates after ``iters`` Lanczos steps with full reorthogonalisation.

    With iters ≥ n the Krylov space is the whole space and the values are exact to rounding.
    After a breakdown (an invariant subspace is found) the remaining diagonal entries are filled
    with α_1, a Rayleigh quotient, so they can never become a spurious extreme.
    """
    hvp, x = _hvp(prob, theta)
    n = x.shape[0]
    k = min(iters, n)
    v0 = jax.random.normal(jax.random.PRNGKey(seed), (n,), dtype=x.dtype)
    v0 = v0 / jnp.linalg.norm(v0)
    _, alphas, betas = _lanczos(hvp, v0, k)
    ritz = jnp.linalg.eigvalsh(_tridiagonal(alphas, betas))
    return ritz[0], ritz[-1]


def krylov_pairs(prob: Problem, theta: Theta, start: Array, iters: int = 64) -> tuple[Array, Array]:
    """(Ritz values θ_j, ascending; Ritz vectors as rows) of ∇²L at one θ on the Krylov space of ``start`` (a flat
    vector of θ's size, nonzero): ``iters`` Lanczos steps with full reorthogonalisation from start/‖start‖.

    The pairs are the Gauss quadrature of the spectral measure of ``start``: with u_j the Ritz vectors,
    startᵀ f(∇²L) start ≈ Σ_j (u_j·start)² f(θ_j), exact for polynomials f of degree < 2·iters, and with
    iters ≥ n (or once the space is invariant) the exact eigenpairs of the part of the spectrum ``start`` has a
    component along. Pairs past a breakdown have a zero vector, so they carry no weight.

    **Arguments:** ``prob`` the problem; ``theta`` one unbatched θ; ``start`` the starting vector; ``iters`` the
    Lanczos steps (at most θ's size are taken)."""
    hvp, x = _hvp(prob, theta)
    k = min(iters, x.shape[0])
    size = jnp.linalg.norm(start)
    V, alphas, betas = _lanczos(hvp, start / jnp.where(size > 0, size, 1.0), k)
    ritz, Y = jnp.linalg.eigh(_tridiagonal(alphas, betas))
    return ritz, Y.T @ V[:k]


def extreme_eigenvalues(prob: Problem, theta: ThetaLike, method: str = "auto", iters: int = 64) -> tuple[Array, Array]:
    """(λ_min, λ_max) of ∇²L, signed; θ may carry a batch axis.

    ``method``: "exact" (eigvalsh of the full Hessian), "lanczos", or "auto" (exact up to
    ``EXACT_MAX_DIM`` parameters).
    """
    if method not in ("auto", "exact", "lanczos"):
        raise ValueError(f"method={method!r} is invalid: must be one of 'auto', 'exact', 'lanczos'")
    if method == "auto":
        method = "exact" if prob.n_params() <= EXACT_MAX_DIM else "lanczos"
    batch, batched = as_batch(prob, theta)
    lo, hi = _extremes(prob, batch, method, iters)
    return unbatch(lo, batched), unbatch(hi, batched)


@eqx.filter_jit
def _extremes(prob: Problem, batch: Theta, method: str, iters: int) -> tuple[Array, Array]:
    if method == "exact":
        ev = jax.vmap(lambda t: _spectrum_one(prob, t))(batch)
        return ev[:, 0], ev[:, -1]
    return jax.vmap(lambda t: lanczos_extremes(prob, t, iters=iters))(batch)


def lambda_max(prob: Problem, theta: ThetaLike, method: str = "auto", iters: int = 64) -> Array:
    """Largest algebraic eigenvalue of the Hessian of the exact loss at θ (batched or not)."""
    return extreme_eigenvalues(prob, theta, method, iters)[1]


def lambda_min(prob: Problem, theta: ThetaLike, method: str = "auto", iters: int = 64) -> Array:
    """Smallest algebraic eigenvalue (negative at a strict saddle)."""
    return extreme_eigenvalues(prob, theta, method, iters)[0]


def _decrement(lam: Array, c: Array) -> Array:
    """½ Σ_k c_k²/|λ_k| over the eigenvalues with |λ_k| > n·ε·max|λ| (a direction flat to round-off adds nothing),
    with c_k the gradient's component along the eigenvector of λ_k; 0 at a zero Hessian."""
    rho = jnp.max(jnp.abs(lam), axis=-1, keepdims=True)
    keep = jnp.abs(lam) > lam.shape[-1] * jnp.finfo(lam.dtype).eps * rho
    return 0.5 * jnp.sum(jnp.where(keep, c / jnp.where(keep, jnp.abs(lam), 1.0) * c, 0.0), axis=-1)


def _exact_decrement(prob: Problem, theta: Theta) -> tuple[Array, Array]:
    """(All Hessian eigenvalues, ascending; the Newton decrement) at one θ, from one eigendecomposition."""
    f, x = _flat_loss(prob, theta)
    lam, V = jnp.linalg.eigh(hessian_matrix(prob, theta))
    return lam, _decrement(lam, V.T @ jax.grad(f)(x))


@eqx.filter_jit
def _spectra_and_decrements(prob: Problem, batch: Theta) -> tuple[Array, Array]:
    return jax.vmap(lambda t: _exact_decrement(prob, t))(batch)


@eqx.filter_jit
def _krylov_decrements(prob: Problem, batch: Theta, iters: int) -> Array:
    def one(t):
        f, x = _flat_loss(prob, t)
        g = jax.grad(f)(x)
        ritz, U = krylov_pairs(prob, t, g, iters)
        return _decrement(ritz, U @ g)

    return jax.vmap(one)(batch)


def spectra_and_decrements(prob: Problem, theta: ThetaLike, iters: int = 64) -> tuple[Array | None, Array]:
    """(The Hessian spectra, ascending, or None above ``EXACT_MAX_DIM`` parameters; the Newton decrements
    ``newton_decrement``) at a batch of points, the two from one eigendecomposition each where it is exact."""
    batch, batched = as_batch(prob, theta)
    if prob.n_params() <= EXACT_MAX_DIM:
        lam, dec = _spectra_and_decrements(prob, batch)
        return unbatch(lam, batched), unbatch(dec, batched)
    return None, unbatch(_krylov_decrements(prob, batch, iters), batched)


def newton_decrement(prob: Problem, theta: ThetaLike, iters: int = 64) -> Array:
    """δL = ½ Σ_k (v_k·∇L)²/|λ_k| at θ (batched or not), over the eigenpairs (λ_k, v_k) of ∇²L with
    |λ_k| > n·ε·max|λ| (directions flat to round-off add nothing): how far L(θ) lies from the level of the critical
    point that the quadratic model puts nearest θ. On a quadratic well it is exactly L(θ) − L*; at a point stopped
    within a solver's tolerance of a critical point it is the spread of L its stopping leaves (½‖∇L‖²/λ near a
    minimum of curvature λ; the same order as L − L* on a quartic well, where λ → 0 as ∇L does).

    **Arguments:**

    - ``prob``: the problem.
    - ``theta``: one θ or a batch on a leading axis.
    - ``iters``: above ``EXACT_MAX_DIM`` parameters, the Lanczos steps from ∇L whose Gauss quadrature of
      v ↦ 1/|λ| gives δL (exact once ``iters`` reaches the number of parameters); below, the spectrum is exact.
    """
    return spectra_and_decrements(prob, theta, iters)[1]
