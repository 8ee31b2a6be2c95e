"""Gauss–Hermite quadrature for Gaussian expectations in low dimension (docs/exact.md).

E[f(X)], X ~ N(μ, Σ), is approximated by Σ_i w_i f(μ + L z_i) with the tensor-product rule of n nodes z per
axis (probabilists' Hermite, so Σ_i w_i g(z_i) = E[g(Z)], Z ~ N(0, I), for g of degree ≤ 2n − 1 in each
variable) and L Lᵀ = Σ. With n = ⌈(degree + 1)/2⌉ it is exact for every polynomial f of total degree ≤ degree
(in fact ≤ 2n − 1), and not for all of degree 2n.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float, PyTree

from popdyn import _validate
from popdyn.exact._tables import WeightedTable, _is_traced, weighted_sum

MAX_NODES = 2**22
"""Largest tensor-product rule n^d built by default."""


def nodes_per_axis(degree: int) -> int:
    """n = ⌈(degree + 1)/2⌉: the fewest Gauss–Hermite nodes exact for degree ``degree`` (2n − 1 ≥ degree)."""
    return (degree + 2) // 2


@functools.lru_cache(maxsize=32)
def _rule(n: int, d: int) -> tuple[np.ndarray, np.ndarray]:
    """Standard-normal tensor rule: nodes (n^d, d) and weights (n^d,) summing to 1, in float64 NumPy."""
    z, w = np.polynomial.hermite_e.hermegauss(n)
    w = w / w.sum()
    grids = np.meshgrid(*([z] * d), indexing="ij")
    nodes = np.stack([g.reshape(-1) for g in grids], axis=1)
    weights = np.ones(n**d)
    for wk in np.meshgrid(*([w] * d), indexing="ij"):
        weights = weights * wk.reshape(-1)
    nodes.setflags(write=False)
    weights.setflags(write=False)
    return nodes, weights


def _check_gaussian(mean, cov, d: int) -> None:
    """Shapes always; values (finite, symmetric, positive semidefinite) when concrete."""
    if np.shape(mean) != (d,):
        raise ValueError(f"mean has shape {np.shape(mean)}: must be ({d},) for a {d}-dimensional rule")
    shape = np.shape(cov)
    if len(shape) != 2 or shape[0] != shape[1]:
        raise ValueError(f"cov has shape {shape}: must be a square ({d}, {d}) matrix")
    if shape != (d, d):
        raise ValueError(f"cov has shape {shape}: must be ({d}, {d}) to match mean of shape ({d},)")
    if not _is_traced(mean):
        m = np.asarray(mean, dtype=np.float64)
        if not np.all(np.isfinite(m)):
            raise ValueError(f"mean={m.tolist()} is invalid: entries must be finite")
    if _is_traced(cov):
        return
    c = np.asarray(cov, dtype=np.float64)
    if not np.all(np.isfinite(c)):
        raise ValueError(f"cov={c.tolist()} is invalid: entries must be finite")
    dtype = np.dtype(getattr(cov, "dtype", np.float64))
    eps = float(np.finfo(dtype).eps) if np.issubdtype(dtype, np.floating) else float(np.finfo(np.float64).eps)
    scale = float(np.max(np.abs(c)))  # round-off relative to the covariance's own size: a tiny cov is checked too
    asym = float(np.max(np.abs(c - c.T)))
    if asym > 64 * eps * scale:
        raise ValueError(
            f"cov is not symmetric: max |cov - cov.T| = {asym:.3g}; a covariance must be symmetric "
            "positive semidefinite"
        )
    lam = float(np.linalg.eigvalsh((c + c.T) / 2).min())
    if lam < -64 * d * eps * scale:
        raise ValueError(f"cov is not positive semidefinite: its smallest eigenvalue is {lam:.6g} (must be >= 0)")


def _eig_factor(cov: Float[Array, "d d"]) -> Float[Array, "d d"]:
    lam, U = jnp.linalg.eigh(cov)
    return U * jnp.sqrt(jnp.maximum(lam, 0.0))[None, :]


def covariance_factor(cov: Float[Array, "d d"]) -> Float[Array, "d d"]:
    """A matrix A with A Aᵀ = cov: the Cholesky factor when it is finite (cov positive definite), else
    U diag(√max(λ, 0)) from the eigen-decomposition (positive semidefinite, singular). Each branch gets a safe
    input when not taken, so gradients stay finite (for positive definite cov). Jits, and ``cov`` may be traced.

    **Arguments:**

    - ``cov``: a symmetric positive semidefinite d × d matrix (symmetrised as (cov + covᵀ)/2 first).
    """
    cov = (cov + cov.T) / 2
    d = cov.shape[0]
    ok = jnp.all(jnp.isfinite(jnp.linalg.cholesky(jax.lax.stop_gradient(cov))))
    eye = jnp.eye(d, dtype=cov.dtype)
    distinct = jnp.diag(jnp.arange(1, d + 1, dtype=cov.dtype))  # eigh's gradient is finite at distinct eigenvalues
    chol = jnp.linalg.cholesky(jnp.where(ok, cov, eye))
    return jnp.where(ok, chol, _eig_factor(jnp.where(ok, distinct, cov)))


class GaussHermite(eqx.Module):
    """Tensor-product Gauss–Hermite rule in ``d`` dimensions exact to total degree ``degree`` (docs/exact.md):
    E[f(X)] ≈ Σ_i w_i f(μ + L z_i), X ~ N(μ, Σ), L Lᵀ = Σ, with n = ⌈(degree + 1)/2⌉ nodes per axis; exact for
    polynomials of total degree ≤ 2n − 1 ≥ degree. The nodes are static (NumPy, built once per (n, d));
    ``mean`` and ``cov`` may be traced."""

    d: int = eqx.field(static=True)
    degree: int = eqx.field(static=True)

    def __init__(self, d: int, degree: int, max_nodes: int = MAX_NODES):
        d = _validate.int_at_least("d", d, 1)
        degree = _validate.int_at_least("degree", degree, 0)
        n = nodes_per_axis(degree)
        if n**d > max_nodes:
            n_ok = 1
            while (n_ok + 1) ** d <= max_nodes:
                n_ok += 1
            raise ValueError(
                f"degree={degree} in d={d} dimensions needs {n}^{d} = {n**d} nodes, over the limit of {max_nodes} "
                f"(degree <= {2 * n_ok - 1} for d = {d}); lower the degree or raise max_nodes"
            )
        self.d = d
        self.degree = degree

    @property
    def n_per_axis(self) -> int:
        """Nodes per axis, n = ⌈(degree + 1)/2⌉."""
        return nodes_per_axis(self.degree)

    @property
    def size(self) -> int:
        """Number of nodes n^d."""
        return self.n_per_axis**self.d

    @property
    def nodes(self) -> np.ndarray:
        """Standard-normal nodes z_i, (n^d, d) float64 NumPy."""
        return _rule(self.n_per_axis, self.d)[0]

    @property
    def weights(self) -> np.ndarray:
        """Weights w_i > 0 summing to 1, (n^d,) float64 NumPy."""
        return _rule(self.n_per_axis, self.d)[1]

    def table(self, mean: Float[ArrayLike, " d"], cov: Float[ArrayLike, "d d"]) -> WeightedTable:
        """The rule for N(mean, cov) as a WeightedTable of points μ + L z_i (rows) and weights w_i."""
        _check_gaussian(mean, cov, self.d)
        mean, cov = jnp.asarray(mean), jnp.asarray(cov)
        dtype = jnp.result_type(mean, cov, float)
        mean, cov = mean.astype(dtype), cov.astype(dtype)
        points = mean[None, :] + jnp.asarray(self.nodes, dtype) @ covariance_factor(cov).T
        return WeightedTable(points, self.weights)

    def expectation(
        self,
        fn: Callable[[Float[Array, " d"]], PyTree],
        mean: Float[ArrayLike, " d"],
        cov: Float[ArrayLike, "d d"],
        chunk: int | None = None,
    ) -> PyTree:
        """Σ_i w_i fn(μ + L z_i) ≈ E[fn(X)], X ~ N(mean, cov); ``chunk`` nodes at a time inside a ``lax.scan``."""
        _check_gaussian(mean, cov, self.d)
        mean, cov = jnp.asarray(mean), jnp.asarray(cov)
        dtype = jnp.result_type(mean, cov, float)
        mean, cov = mean.astype(dtype), cov.astype(dtype)
        A = covariance_factor(cov)
        nodes, weights = jnp.asarray(self.nodes, dtype), jnp.asarray(self.weights, dtype)

        def batch(idx):
            z = nodes if idx is None else nodes[idx]
            return weights if idx is None else weights[idx], jax.vmap(fn)(mean[None, :] + z @ A.T)

        return weighted_sum(batch, self.size, chunk)


def gaussian_expectation(
    fn: Callable[[Float[Array, " d"]], PyTree] | Callable[[Float[Array, ""]], PyTree],
    mean: Float[ArrayLike, ""] | Float[ArrayLike, " d"],
    cov: Float[ArrayLike, ""] | Float[ArrayLike, "d d"],
    degree: int,
    chunk: int | None = None,
    max_nodes: int = MAX_NODES,
) -> PyTree:
    """E[fn(X)], X ~ N(mean, cov), by the Gauss–Hermite rule exact for polynomials of total degree ≤ ``degree``
    (docs/exact.md). A scalar mean with a scalar variance ``cov`` is the 1-D case, and fn then gets a scalar.

    **Arguments:**

    - ``fn``: the integrand, x ∈ ℝ^d (or a scalar in 1-D) → a pytree of arrays; jit/vmap-able.
    - ``mean``: μ, shape (d,) or a scalar; ``cov``: Σ, d × d positive semidefinite, or a scalar variance (both may
      be traced).
    - ``degree``: the total polynomial degree integrated exactly (≥ 0).
    - ``chunk``: nodes evaluated per step (None: all at once).
    - ``max_nodes``: the largest rule n^d built (``MAX_NODES`` by default; ValueError above it).
    """
    if np.ndim(mean) == 0:
        if np.ndim(cov) != 0:
            raise ValueError(f"cov has shape {np.shape(cov)}: with a scalar mean it must be a scalar variance")
        rule = GaussHermite(1, degree, max_nodes)
        return rule.expectation(lambda x: fn(x[0]), jnp.reshape(mean, (1,)), jnp.reshape(cov, (1, 1)), chunk)
    if np.ndim(mean) != 1 or np.shape(mean)[0] == 0:
        raise ValueError(f"mean has shape {np.shape(mean)}: must be a vector (d,) with d >= 1, or a scalar")
    return GaussHermite(np.shape(mean)[0], degree, max_nodes).expectation(fn, mean, cov, chunk)
