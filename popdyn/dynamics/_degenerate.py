"""Minimum, saddle or undecided at a degenerate critical point: a higher-order probe of the loss around it
(docs/dynamics.md, "Degenerate critical points").

At a steady point whose Hessian has no negative eigenvalue but zero ones (|λ| ≤ saddle_tol·ρ, ρ the largest
|λ|), the second-order test says nothing: L may rise along the null directions at fourth order (a minimum, or a
manifold of minima), or fall at third or fourth order (a higher-order saddle, e.g. a two-layer network at
all-zero weights). The probe looks for the lowest point on spheres of radii r = RADII·(1 + ‖θ‖) around θ:

    D(r) = min over ‖u‖ = 1 of L(θ + r·u) − L(θ),

by a greedy descent on the sphere (in the whole parameter space, so a falling path that bends out of the null
space — Peano's (y − x²)(y − 2x²) — is found) from the null eigenvectors (±) and fixed pseudo-random unit
vectors of the null space. D(r) is compared with what a non-degenerate neighbourhood could give, A(r): the fall
the quadratic model allows at a point within the solver's tolerance of the critical point (½ gᵀH₊⁺g over the
non-null eigenvalues, plus r‖P_N g‖ along the null space N), the curvature left in N (½r²·max |λ| over
the null eigenvalues, each ≤ saddle_tol·ρ), and the round-off of L (measured from L's changes under steps of
√ε·(1 + ‖θ‖), and ε|L|), all with a margin. Every term scales with L, so the verdict does not change when L is
multiplied by a constant. D(r) < −A(r) at every radius: SADDLE (a fall that persists as the sphere shrinks). Otherwise
D(r) ≥ −A(r) on the smallest sphere: CONVERGED (L does not fall near θ: an isolated degenerate minimum, or a
manifold of minima, even one that ends just beyond the smallest sphere). Anything else (a fall on the smallest
sphere only, or not on every one): DEGENERATE.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree
from jaxtyping import Array, Bool, Float

from popdyn.curvature import hessian_matrix
from popdyn.dynamics import _stopping as stopping
from popdyn.dynamics._status import Status
from popdyn.problem import Problem, Theta

RADII = (0.02, 0.01, 0.005)
"""Probe radii, in units of 1 + ‖θ‖."""
N_EIGEN = 4
"""Null eigenvectors (each with both signs) that start the search on every sphere."""
N_RANDOM = 8
"""Fixed pseudo-random unit vectors of the null space that start it too."""
N_STEPS = 20
"""Greedy steps on the sphere from each start."""
MARGIN = 4.0
"""Safety factor on the allowance A(r)."""
CHUNK_BYTES = 64 * 2**20
"""Memory the dense Hessians of one call may take: a call probes at most ``chunk(n)`` points."""
MIN_CALL = 8
"""The fewest points a call probes (``call_size``)."""


def chunk(n: int) -> int:
    """The most points probed in one call for ``n`` parameters: CHUNK_BYTES of Hessians (n² float64 each), between 32
    and 1024. Larger calls spread the fixed cost of each operation over more points: a 128 × 128 Markov GD basin map,
    whose 16,384 end points all lie on a manifold of minima, spent 3.4 s in the probe with 32 points a call and
    1.7 s with 1024 (0.6 s once ``refine`` searches the larger spheres only where the smallest shows a fall)."""
    return int(min(1024, max(32, CHUNK_BYTES // (8 * n * n))))


def call_size(n: int, count: int) -> int:
    """Points probed in one call when ``count`` points of ``n`` parameters are to be probed: ``count`` rounded up to a
    power of two, at least MIN_CALL and at most ``chunk(n)``. A few points take a call of their own size, and the
    probe of a problem has at most one program per power of two: 3 points of the canonical Markov model (2
    parameters) took 0.085 s in a call of 1024 and 2 ms in one of 8, those of its transformer (221 parameters, N = 6)
    72 s in a call of 171 and 4.5 s in one of 8 (the smallest sphere, warm). Under the command line's guarded XLA
    (``popdyn._xla``) a point's falls are the same bit for bit in a call of any size; without the guard, jaxlib
    0.10.2's YNNPACK reductions change their last bits (up to 7e-15 relative) from calls of 128 or 256 points on, which
    could change a verdict only where a fall equals its allowance to that precision.

    **Arguments:**

    - ``n``: the number of parameters.
    - ``count``: the number of points to probe (≥ 1).
    """
    return min(chunk(n), max(MIN_CALL, 1 << (count - 1).bit_length()))


def flat(lam: Float[Array, "*B n"], saddle_tol: float) -> Bool[Array, "*B"]:
    """Whether a spectrum (ascending) has a zero eigenvalue: min |λ| ≤ saddle_tol·max(|λ_min|, |λ_max|)
    (all of them at a zero Hessian)."""
    return jnp.any(_null(lam, saddle_tol), axis=-1)


def _null(lam: Float[Array, "*B n"], saddle_tol: float) -> Bool[Array, "*B n"]:
    """Which eigenvalues of a spectrum (ascending) count as zero: |λ| ≤ saddle_tol·max(|λ_min|, |λ_max|)."""
    rho = jnp.maximum(jnp.abs(lam[..., :1]), jnp.abs(lam[..., -1:]))
    return jnp.abs(lam) <= saddle_tol * rho


def _unit(v: Array) -> Array:
    """v/‖v‖ without underflow or overflow; 0 ↦ 0."""
    n = stopping.norm(v)
    return v / jnp.where(n > 0, n, 1.0)


def _descend(loss, x: Array, r: Array, u: Array, l0: Array) -> Array:
    """min over the sphere ‖v‖ = r of L(x + v) − L(x), by N_STEPS greedy rotations of u towards −(tangential
    gradient), each by an angle that grows ×1.5 after a success and halves after a failure (from 0.5)."""
    vg = jax.value_and_grad(loss)

    def step(carry, _):
        u, d, g, angle = carry
        t = _unit(g - jnp.vdot(g, u) * u)
        v = _unit(jnp.cos(angle) * u - jnp.sin(angle) * t)
        lv, gv = vg(x + r * v)
        better = lv - l0 < d
        u, d, g = (jnp.where(better, a, b) for a, b in ((v, u), (lv - l0, d), (gv, g)))
        return (u, d, g, jnp.where(better, jnp.minimum(1.5 * angle, 1.0), 0.5 * angle)), None

    l1, g1 = vg(x + r * u)
    (_, d, _, _), _ = jax.lax.scan(step, (u, l1 - l0, g1, jnp.asarray(0.5, x.dtype)), None, length=N_STEPS)
    return d


def _falls(prob: Problem, theta: Theta, saddle_tol: float, radii: tuple[float, ...]) -> tuple[Array, Array]:
    """(D(r), A(r)) at one point for the radii ``radii`` (in units of 1 + ‖θ‖): the lowest L(θ + r·u) − L(θ) found
    on each sphere, and the allowance A(r) (module docstring)."""
    x, unravel = ravel_pytree(theta)
    loss = lambda z: prob.loss(unravel(z))  # noqa: E731
    n = x.shape[0]
    lam, V = jnp.linalg.eigh(hessian_matrix(prob, theta))
    null = _null(lam, saddle_tol)
    l0, g = jax.value_and_grad(loss)(x)
    c = V.T @ g
    eps = jnp.finfo(x.dtype).eps
    quad = 0.5 * jnp.sum(jnp.where(null, 0.0, c / jnp.where(null, 1.0, lam) * c))  # (c/λ)·c: no c² to underflow
    g_null = stopping.norm(jnp.where(null, c, 0.0))
    k = min(n, N_EIGEN)
    eig = jnp.where(null[:k], V[:, :k], 0.0).T
    mix = jax.random.normal(jax.random.PRNGKey(0), (N_RANDOM, n), x.dtype) @ (V * null).T
    starts = jax.vmap(_unit)(jnp.concatenate([eig, -eig, mix]))
    scale = 1.0 + jnp.linalg.norm(x)
    wobble = jnp.max(jnp.abs(jax.vmap(lambda u: loss(x + jnp.sqrt(eps) * scale * u) - l0)(starts)))
    noise = eps * jnp.abs(l0) + wobble
    r = jnp.asarray(radii, x.dtype) * scale
    d = jnp.min(jax.vmap(lambda r_: jax.vmap(lambda u: _descend(loss, x, r_, u, l0))(starts))(r), axis=1)
    allowance = MARGIN * (quad + r * g_null + 0.5 * r**2 * jnp.max(jnp.where(null, jnp.abs(lam), 0.0)) + noise)
    return d, allowance


@eqx.filter_jit
def _falls_batch(prob: Problem, batch: Theta, saddle_tol: float, radii: tuple[float, ...]) -> tuple[Array, Array]:
    return jax.vmap(lambda t: _falls(prob, t, saddle_tol, radii))(batch)


def _falls_at(prob: Problem, final: Theta, idx: np.ndarray, saddle_tol: float, radii: tuple[float, ...]):
    """``_falls`` at the points ``idx`` of ``final``, in calls of ``call_size(n, len(idx))`` points (the last one
    padded with its first point): (D, A), each of shape (len(idx), len(radii))."""
    size = call_size(prob.n_params(), idx.size)
    host = jax.tree_util.tree_map(np.asarray, final)  # picked on the host: no gather program for each index shape
    parts = []
    for start in range(0, idx.size, size):
        part = idx[start : start + size]
        take = np.concatenate([part, np.full(size - part.size, part[0])])
        sub = jax.tree_util.tree_map(lambda a, take=take: a[take], host)
        parts.append([np.asarray(v)[: part.size] for v in _falls_batch(prob, sub, saddle_tol, radii)])
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


def refine(prob: Problem, final: Theta, status: np.ndarray, flat_points: np.ndarray, saddle_tol: float) -> np.ndarray:
    """The statuses after the probe at the points ``flat_points`` marks (converged or late, zero eigenvalues): a
    SADDLE verdict makes the point SADDLE, DEGENERATE makes it DEGENERATE, CONVERGED keeps its status.

    The smallest sphere decides first: no fall beyond its allowance there is the verdict CONVERGED whatever the
    larger spheres show, so they are searched only at the points that fell on it (SADDLE when they fall on every
    sphere, else DEGENERATE). Most flagged points lie on a manifold of minima, and this searches one sphere there
    instead of three. The points run in calls of ``call_size(n, count)``: a program per problem, pass and size."""
    idx = np.flatnonzero(flat_points)
    if idx.size == 0:
        return status
    d_small, a_small = (v[:, 0] for v in _falls_at(prob, final, idx, saddle_tol, RADII[-1:]))
    held = d_small >= -a_small  # NaN is not held: DEGENERATE, as a failed search is no verdict
    verdict = np.full(idx.size, int(Status.CONVERGED))
    if not held.all():
        d, a = _falls_at(prob, final, idx[~held], saddle_tol, RADII[:-1])
        every = np.all(d < -a, axis=1) & (d_small[~held] < -a_small[~held])
        verdict[~held] = np.where(every, int(Status.SADDLE), int(Status.DEGENERATE))
    out = np.array(status, copy=True)
    out[idx] = np.where(verdict == int(Status.CONVERGED), out[idx], verdict)
    return out
