"""SGD's gradient noise, exactly: the covariance of per-example gradients under the problem's own measure of
examples (docs/sgd.md).

With per-example loss ℓ(θ, x) and examples x_i of weights w_i (``prob.examples()``, enumerated exactly), the
per-example gradient g_i = ∇_θ ℓ(θ, x_i) has mean ḡ = Σ_i w_i g_i = ∇L(θ) and covariance

    Σ(θ) = Σ_i w_i (g_i − ḡ)(g_i − ḡ)ᵀ = E[g gᵀ] − ḡ ḡᵀ,

over the flattened θ (``jax.flatten_util.ravel_pytree``'s order). The mean ĝ_B of a minibatch of B examples has
covariance c_B Σ: c_B = 1/B for B i.i.d. draws from the measure (with replacement, or online), and
c_B = (n − B)/(B(n − 1)) for a uniformly random B-subset of n equally weighted examples (without replacement).
Every quantity is computed from centred gradients g_i − ḡ, in passes over the examples: Σ is formed only on
request (``covariance``), its action v ↦ Σv = Σ_i w_i (g_i − ḡ)((g_i − ḡ)ᵀv) serves the top eigenpairs.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree
from jaxtyping import Array, ArrayLike, Float

from popdyn import _validate
from popdyn._batching import batch_size, checked
from popdyn.exact._minibatch import check_minibatch
from popdyn.problem import Measure, Problem, Theta, ThetaLike, check_measure

DENSE_MAX_DIM = 2048
"""The largest number of parameters d for which ``GradientNoise.covariance`` forms the dense d × d matrix."""

CHUNK_ELEMENTS = 2**22
"""Examples are taken in chunks whose per-example outputs hold at most this many numbers (chunk × d × columns)."""

OVERSAMPLE = 10
"""``top(k)`` iterates a block of k + OVERSAMPLE vectors (at most d)."""


def minibatch_factor(batch: int | None, replace: bool | None, n: int) -> float:
    """c_B with Cov(ĝ_B) = c_B Σ for the mean ĝ_B of a minibatch of ``batch`` examples out of ``n``.

    1 without a minibatch (one example); 1/B for i.i.d. draws; (n − B)/(B(n − 1)) for a uniformly random B-subset
    of n equally weighted examples (0 at B = n). [derived: with c_i = g_i − ḡ, Σ_i c_i = 0, P(i ∈ S) = B/n and
    P(i, j ∈ S) = B(B − 1)/(n(n − 1)) give Cov(Σ_{i∈S} g_i) = BΣ − B(B − 1)Σ/(n − 1) = BΣ(n − B)/(n − 1); divide
    by B².]

    **Arguments:**

    - ``batch``: B, or None for no minibatch.
    - ``replace``: True (with replacement) or None (online draws from the measure): 1/B; False: without.
    - ``n``: the number of examples (used without replacement only).
    """
    if batch is None:
        return 1.0
    if replace is not False:
        return 1.0 / batch
    return 0.0 if batch == n else (n - batch) / (batch * (n - 1))


def _check_sampling(batch: int | None, replace: bool | None, measure: Measure) -> tuple[int, float]:
    """(n, c_B) for a minibatch of ``batch`` examples drawn from ``measure``, after ``check_minibatch``'s checks:
    ValueError naming a bad ``batch`` or ``replace``, or unequal weights without replacement."""
    n = check_minibatch(batch, replace, measure)
    if batch is None:
        return n, 1.0
    return n, minibatch_factor(int(batch), None if replace is None else bool(replace), n)


def _unbatched(prob: Problem, theta: ThetaLike, name: str, caller: str) -> Theta:
    """``theta`` as one θ of float leaves (the default float dtype); ValueError when it has a batch axis.

    **Arguments:** ``prob`` the problem; ``theta`` the point; ``name`` and ``caller`` how the error names them.
    """
    if batch_size(prob, theta) is not None:
        raise ValueError(f"{name} has a batch axis: {caller} takes one unbatched θ")
    return jax.tree_util.tree_map(lambda x: jnp.asarray(x, dtype=jnp.result_type(float)), theta)


def _example_gradient(prob: Problem, theta: Theta, x) -> Float[Array, " d"]:
    """g(x) = ∇_θ ℓ(θ, x), flattened."""
    return ravel_pytree(jax.grad(prob.example_loss)(theta, x))[0]


def _chunk_for(n: int, width: int) -> int:
    """Examples per chunk when each gives ``width`` numbers: at most CHUNK_ELEMENTS in all, between 1 and n."""
    return max(1, min(n, CHUNK_ELEMENTS // max(width, 1)))


@eqx.filter_jit
def _moments(prob: Problem, theta: Theta, chunk: int) -> tuple[Float[Array, " d"], Float[Array, ""]]:
    """(ḡ, tr Σ) = (Σ_i w_i g_i, Σ_i w_i |g_i − ḡ|²): two passes over the examples."""
    data = prob.examples()
    grad = functools.partial(_example_gradient, prob, theta)
    mean = data.expectation(grad, chunk=chunk)
    return mean, data.expectation(lambda x: jnp.sum((grad(x) - mean) ** 2), chunk=chunk)


@eqx.filter_jit
def _apply(prob: Problem, theta: Theta, mean: Float[Array, " d"], V: Float[Array, "d p"], chunk: int) -> Array:
    """Σ V = Σ_i w_i c_i (c_iᵀ V), c_i = g_i − ḡ: one pass over the examples, Σ never formed."""

    def one(x):
        c = _example_gradient(prob, theta, x) - mean
        return c[:, None] * (c @ V)[None, :]

    return prob.examples().expectation(one, chunk=chunk)


@dataclass(frozen=True)
class Eigenpairs:
    """The top eigenpairs of a covariance, largest first (``GradientNoise.top``).

    - ``values`` (k,): eigenvalues λ_1 ≥ … ≥ λ_k (Ritz values); ``vectors`` (d, k): orthonormal eigenvectors.
    - ``residuals`` (k,): ‖C u_i − λ_i u_i‖, each a bound on the distance from λ_i to an eigenvalue of C.
    - ``converged``: every residual ≤ rtol · λ_1; ``passes``: passes over the examples it took.
    """

    values: Float[np.ndarray, " k"]
    vectors: Float[np.ndarray, "d k"]
    residuals: Float[np.ndarray, " k"]
    converged: bool
    passes: int


def _rayleigh_ritz(basis, images, T, k):
    """The top k Ritz pairs of the basis (d, m) with images = C basis, T = basisᵀ C basis, and their residuals."""
    lam, S = np.linalg.eigh(T)
    order = np.argsort(lam)[::-1][:k]
    lam, S = lam[order], S[:, order]
    vectors = basis @ S
    return lam, vectors, np.linalg.norm(images @ S - vectors * lam, axis=0)


def block_krylov(
    apply: Callable[[np.ndarray], ArrayLike], d: int, k: int, rtol: float, max_passes: int, seed: int
) -> Eigenpairs:
    """Top-k eigenpairs of a symmetric positive semidefinite d × d matrix C known by its action on blocks.

    Block Krylov with Rayleigh–Ritz: from a random orthonormal block of p = min(d, k + OVERSAMPLE) vectors, each
    pass applies C to the newest block, adds the block to the basis Q and the images' part orthogonal to Q as the
    next block (Householder QR of the two together, so Q stays orthonormal to rounding), and takes the top Ritz
    pairs (λ_i, u_i = Q s_i) of QᵀCQ s = λ s with their residuals ‖C u_i − λ_i u_i‖ (no extra pass: C Q is
    kept). It stops when every one of the k residuals is ≤ rtol · λ_1, when Q spans all of ℝ^d (exact to
    rounding), or after ``max_passes`` passes.

    **Arguments:**

    - ``apply``: a (d, p) block V → C V.
    - ``d``: the dimension; ``k``: how many pairs, 1 ≤ k ≤ d.
    - ``rtol``: the residual tolerance relative to λ_1; ``max_passes``: the most applications of C.
    - ``seed``: seeds NumPy's generator for the random starting block.
    """
    p = min(d, k + OVERSAMPLE)
    block = np.linalg.qr(np.random.default_rng(seed).standard_normal((d, p)))[0]
    basis, images, T = np.zeros((d, 0)), np.zeros((d, 0)), np.zeros((0, 0))
    passes = 0
    while True:
        passes += 1
        width = block.shape[1]
        image = np.asarray(apply(np.pad(block, ((0, 0), (0, p - width)))))[:, :width]
        basis, images = np.hstack([basis, block]), np.hstack([images, image])
        m = basis.shape[1]
        cross = basis.T @ image  # the new columns of T = basisᵀ C basis: against the old basis, then the block
        old, new = cross[: m - width], cross[m - width :]
        T = np.block([[T, old], [old.T, (new + new.T) / 2]])
        lam, vectors, residuals = _rayleigh_ritz(basis, images, T, k)
        converged = bool(np.all(residuals <= rtol * max(lam[0], 0.0)))
        if converged or m == d or passes == max_passes:
            break
        block = np.linalg.qr(np.hstack([basis, image]))[0][:, m : m + min(p, d - m)]
    return Eigenpairs(lam, vectors, residuals, converged, passes)


@dataclass(frozen=True)
class GradientNoise:
    """The exact covariance C = c_B Σ(θ) of SGD's gradient at one θ (``gradient_noise``; docs/sgd.md).

    Σ = Σ_i w_i (g_i − ḡ)(g_i − ḡ)ᵀ is the covariance of one example's gradient g_i = ∇_θ ℓ(θ, x_i) over the
    flattened θ; c_B is 1 (``batch=None``), 1/B (B i.i.d. draws: ``replace`` True or None) or
    (n − B)/(B(n − 1)) (a random B-subset of n equally weighted examples: ``replace=False``).

    - ``mean`` (d,): ḡ = ∇L(θ), the gradient SGD estimates without bias; ``unravel`` turns a (d,) vector into θ's
      pytree.
    - ``trace``: tr C, the expected squared distance E‖ĝ_B − ḡ‖².
    - ``covariance`` (d, d): C itself, formed on first access (one pass), for d ≤ ``DENSE_MAX_DIM``.
    - ``matvec(v)``: C v without forming C; ``top(k)``: its k largest eigenpairs, matrix-free.
    - ``factor``: c_B; ``batch``, ``replace``: the sampling asked for; ``n``: the number of examples.
    """

    mean: Float[np.ndarray, " d"]
    trace: float
    factor: float
    batch: int | None
    replace: bool | None
    n: int
    prob: Problem = field(repr=False)
    theta: Theta = field(repr=False)
    unravel: Callable = field(repr=False)

    @property
    def dim(self) -> int:
        """d, the number of scalar parameters."""
        return self.mean.shape[0]

    def matvec(self, v: Float[ArrayLike, " d"] | Float[ArrayLike, "d p"]) -> np.ndarray:
        """C v for one vector v (d,) or each column of v (d, p): one pass over the examples, C never formed."""
        V = np.asarray(v, np.float64)
        if V.ndim not in (1, 2) or V.shape[0] != self.dim:
            raise ValueError(f"v has shape {V.shape}: must be ({self.dim},) or ({self.dim}, p)")
        block = V.reshape(self.dim, -1)
        out = self.factor * np.asarray(self._population_apply(block))
        return out.reshape(V.shape)

    def _population_apply(self, block: np.ndarray) -> Array:
        """Σ block, block (d, p) (population Σ, no minibatch factor)."""
        chunk = _chunk_for(self.n, self.dim * block.shape[1])
        mean = jnp.asarray(self.mean)
        return _apply(self.prob, self.theta, mean, jnp.asarray(block, mean.dtype), chunk)

    @functools.cached_property
    def covariance(self) -> Float[np.ndarray, "d d"]:
        """C as a dense, symmetric d × d matrix (for d ≤ ``DENSE_MAX_DIM``; use ``top``/``matvec`` above)."""
        if self.dim > DENSE_MAX_DIM:
            raise ValueError(
                f"θ has d = {self.dim} parameters: the dense covariance is formed for d <= DENSE_MAX_DIM = "
                f"{DENSE_MAX_DIM}; use top(k), trace or matvec(v), which never form it"
            )
        S = np.asarray(self._population_apply(np.eye(self.dim)))
        return self.factor * (S + S.T) / 2

    def top(self, k: int = 1, *, rtol: float = 1e-8, max_passes: int = 30, seed: int = 0) -> Eigenpairs:
        """The k largest eigenpairs of C, matrix-free (``block_krylov`` on v ↦ Σv; each pass is one pass over the
        examples).

        **Arguments:**

        - ``k``: how many, an integer in [1, d].
        - ``rtol``: stop when every residual ‖Cu − λu‖ ≤ rtol · λ_1 (an eigenvalue is then accurate to about
          residual² / gap).
        - ``max_passes``: at most this many passes; a result not converged by then warns (``converged=False``).
        - ``seed``: the random starting block.
        """
        k = _validate.int_at_least("k", k, 1)
        if k > self.dim:
            raise ValueError(f"k={k} is out of range: must be an integer in [1, d] = [1, {self.dim}]")
        rtol = _validate.positive("rtol", rtol)
        max_passes = _validate.int_at_least("max_passes", max_passes, 1)
        found = block_krylov(self._population_apply, self.dim, k, rtol, max_passes, _validate.seed("seed", seed))
        if not found.converged:
            warnings.warn(
                f"GradientNoise.top({k}) did not converge in {found.passes} passes: largest residual "
                f"{found.residuals.max():.3g} > rtol * λ_1 = {rtol * found.values[0]:.3g}; raise max_passes",
                stacklevel=2,
            )
        scale = self.factor
        return Eigenpairs(scale * found.values, found.vectors, scale * found.residuals, found.converged, found.passes)


def gradient_noise(
    prob: Problem, theta: ThetaLike, batch: int | None = None, replace: bool | None = True
) -> GradientNoise:
    """The exact covariance of SGD's gradient at θ: Σ(θ) = E[∇ℓ ∇ℓᵀ] − ∇L ∇Lᵀ over the problem's examples, times
    the minibatch factor (docs/sgd.md).

    **Arguments:**

    - ``prob``: a Problem that declares its examples (``Problem.from_examples``, or a class implementing
      ``examples()`` and ``example_loss(θ, x)``); any other raises ValueError naming it.
    - ``theta``: one (unbatched) parameter pytree.
    - ``batch``: None (the covariance of one example's gradient, Σ) or B, an integer ≥ 1: the covariance of the
      mean gradient ĝ_B of a minibatch of B examples.
    - ``replace``: True: B i.i.d. draws from the measure (with replacement), Σ/B. False: a uniformly random
      B-subset of the n examples (without replacement; B ≤ n, and every example must have weight 1/n: a weighted
      measure is refused), Σ(n − B)/(B(n − 1)). None: online draws from the measure, each minibatch fresh, which
      is the i.i.d. case, Σ/B.

    Returns a ``GradientNoise``: the mean gradient and the trace at once (two passes over the examples), the
    dense covariance, products C v and the top eigenpairs on request.
    """
    measure = check_measure("prob.examples()", checked(prob).examples())
    n, factor = _check_sampling(batch, replace, measure)
    theta = _unbatched(prob, theta, "theta", "gradient_noise")
    flat, unravel = ravel_pytree(theta)
    mean, trace = _moments(prob, theta, _chunk_for(n, flat.shape[0]))
    return GradientNoise(
        mean=np.asarray(mean),
        trace=factor * float(trace),
        factor=factor,
        batch=None if batch is None else int(batch),
        replace=None if replace is None else bool(replace),
        n=n,
        prob=prob,
        theta=theta,
        unravel=unravel,
    )
