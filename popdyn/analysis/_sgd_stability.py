"""SGD's own step-size condition, exactly: mean-square linear stability of minibatch SGD at a minimum
(docs/sgd.md, "SGD's step-size condition").

Linearised at a minimum θ*, SGD moves the offset δ = θ − θ* by δ ← (I − ηĤ_B)δ, where Ĥ_B is the mean of the
per-example Hessians H_i = ∇²_θ ℓ(θ*, x_i) over the minibatch. The second moment C = E[δδᵀ] then evolves by the
linear map

    T_η(C) = E[(I − ηĤ_B) C (I − ηĤ_B)] = C − η A(C) + η² Q(C),
    A(C) = HC + CH,   Q(C) = (1 − p) HCH + p E_i H_i C H_i,

with H = E_i H_i and p = c_B the minibatch factor of the gradient noise (``noise.minibatch_factor``: 1/B for i.i.d.
draws, (n − B)/(B(n − 1)) for a B-subset of n examples) [derived: E[Ĥ_B C Ĥ_B] = HCH + c_B(E_i H_i C H_i − HCH),
the covariance of a minibatch mean, bilinear in Ĥ_B]. The same T_η belongs to a process that takes a full-batch
step with probability 1 − p and a one-example step with probability p. T_η is self-adjoint for ⟨X, Y⟩ = tr(XY)
and maps positive semidefinite matrices to positive semidefinite ones, so its spectral radius is its largest
eigenvalue, with a PSD eigenvector, and it is ≤ 1 iff η⟨C, QC⟩ ≤ ⟨C, AC⟩ for every symmetric C. With H positive
definite, SGD is mean-square stable iff η ≤ η*(B) = 1/μ_max, μ_max the largest eigenvalue of the pencil (Q, A):
of M = A^{-1/2} Q A^{-1/2}, where A is diagonal in H's eigenbasis (eigenvalues λ_a + λ_b), so A^{-1/2} and the
Lyapunov solve A⁻¹ act entrywise there. At p = 0, M has the eigenvalues λ_aλ_b/(λ_a + λ_b) ≤ λ_max/2: η* = 2/λ_max,
GD's threshold. On PSD C, Q's part p E_i (H_i − H) C (H_i − H) is PSD, so μ_max does not decrease with p and η*
does not decrease with B.

Flat directions. Let N be the null space of H (|λ| ≤ saddle_tol·ρ). If every H_i annihilates N (an interpolating
minimum of an over-parameterised model), the offset along N never moves, T_η is the identity on matrices supported
on N, and η* is the threshold of the dynamics on H's range. If some H_i does not (‖H_i N‖ > saddle_tol·‖H_i‖ in
the mean square over examples), then for p > 0 no step size is stable: C = P_N has ⟨C, T_η C⟩ > ⟨C, C⟩ whenever
P_N H_i P_N ≠ 0; otherwise Q couples the matrices supported on N, where A vanishes, to the others, and
⟨C, (ηQ − A)C⟩ > 0 on a combination of the two. So η*(B) = 0: the offset along the flat directions is multiplied by
random factors of mean 1.

A valley of minima (docs/sgd.md, "Flat directions"). Write δ = Ux + Vz with U, V orthonormal bases of H's range R
and of N, and split each H_i into K_i = UᵀH_iU, J_i = UᵀH_iV, N_i = VᵀH_iV (E K_i = Λ, E J_i = 0, E N_i = 0). With
the valley coordinate frozen, the motion across the valley x ← (I − ηK̂)x has the second-moment map of K_i on r × r
matrices, and its threshold η*_⊥(B) is the one the pencil above gives on R: what is solved where the H_i do not act
on N. Exact for the linearisation [derived, E N̂ = E Ĵ = 0, E[ÂᵀÂ] = (1 − p)E[A]ᵀE[A] + p E[A_iᵀA_i]]: z is a
martingale, E‖z‖² never decreases; from x = 0, one step takes E‖z‖² from ‖z‖² to ‖z‖² + η²p zᵀ(E N_i²)z and kicks
E‖x‖² to η²p zᵀ(E J_iᵀJ_i)z; from δ = 0, the gradient noise gives E‖z‖² = η² c_B tr(VᵀΣV). With the motion across
frozen (x = 0, Ĵ dropped), E‖z‖² grows by the factor 1 + η²pν per step, ν ≤ λ_max(E N_i²) the largest eigenvalue of
C ↦ E N_i C N_i (equal for one flat direction), and the spectral radius of T_η is at least that (its Rayleigh
quotient on the matrices supported on N).
"""

from __future__ import annotations

import abc
import functools
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree
from jaxtyping import Array, ArrayLike, Float

from popdyn import _validate
from popdyn._batching import checked
from popdyn.analysis._noise import (
    OVERSAMPLE,
    _check_sampling,
    _chunk_for,
    _example_gradient,
    _unbatched,
    block_krylov,
    gradient_noise,
)
from popdyn.dynamics._status import negative
from popdyn.problem import Problem, Theta, ThetaLike, check_measure

DENSE_MAX_RANK = 40
"""Up to this rank r of H, ``DensePencil`` is the default: it forms the r(r+1)/2 × r(r+1)/2 matrix of the pencil."""

MAX_DIM = 512
"""The most parameters d: H is formed and diagonalised (d × d), and the Krylov basis holds vectors of d(d+1)/2."""


def _example_hessian_times(prob: Problem, theta: Theta, x, V: Float[Array, "d k"]) -> Float[Array, "d k"]:
    """H_x V = ∇²_θ ℓ(θ, x) V, column by column, by Hessian-vector products (forward over reverse, flattened θ)."""
    unravel = ravel_pytree(theta)[1]
    grad = lambda t: _example_gradient(prob, t, x)  # noqa: E731
    return jax.vmap(lambda v: jax.jvp(grad, (theta,), (unravel(v),))[1], in_axes=1, out_axes=1)(V)


def _projected(prob: Problem, theta: Theta, x, U: Float[Array, "d r"]) -> Float[Array, "r r"]:
    """K_x = Uᵀ H_x U, one example's Hessian in H's range basis (r Hessian-vector products)."""
    K = U.T @ _example_hessian_times(prob, theta, x, U)
    return (K + K.T) / 2


@eqx.filter_jit
def _mean_hessian(prob: Problem, theta: Theta, chunk: int) -> Float[Array, "d d"]:
    """H = Σ_i w_i H_i, from the examples' own Hessians."""
    flat = ravel_pytree(theta)[0]
    eye = jnp.eye(flat.shape[0], dtype=flat.dtype)
    return prob.examples().expectation(lambda x: _example_hessian_times(prob, theta, x, eye), chunk=chunk)


@eqx.filter_jit
def _flat_moments(prob: Problem, theta: Theta, R: Array, N: Array, chunk: int) -> tuple[Array, Array, Array]:
    """(Σ_i w_i N_i², Σ_i w_i J_iᵀJ_i, Σ_i w_i ‖H_i R‖²_F) for the blocks N_i = NᵀH_iN (k × k) and J_i = RᵀH_iN
    (r × k) of the examples' Hessians on H's flat directions N and between its range R and N. With [R, N]
    orthonormal, H_iN = R J_i + N N_i, so the traces of the first two sum to Σ_i w_i ‖H_i N‖²_F: how much the
    examples' Hessians act on the flat directions (and the three to Σ_i w_i ‖H_i‖²_F)."""

    def one(x):
        flat, kept = _example_hessian_times(prob, theta, x, N), _example_hessian_times(prob, theta, x, R)
        along, across = N.T @ flat, R.T @ flat
        return along.T @ along, across.T @ across, jnp.sum(kept**2)

    return prob.examples().expectation(one, chunk=chunk)


def _pairs(r: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The pairs a ≤ b indexing the orthonormal basis of symmetric r × r matrices (E_aa; (E_ab + E_ba)/√2), and
    the coordinates' weights: svec(C) = (C_aa; √2 C_ab), so ⟨svec X, svec Y⟩ = tr(XY)."""
    a, b = np.triu_indices(r)
    return a, b, np.where(a == b, 1.0, np.sqrt(2.0))


@eqx.filter_jit
def _moment_matrix(prob: Problem, theta: Theta, U: Array, chunk: int) -> Float[Array, "m m"]:
    """The matrix S of C ↦ Σ_i w_i K_i C K_i on symmetric r × r matrices in the orthonormal basis of ``_pairs``:
    S[(a,b),(c,d)] = ½ s_ab s_cd Σ_i w_i (K_ac K_bd + K_ad K_bc), s the weights of ``_pairs`` [derived:
    tr(F_ab K F_cd K) = 2(K_ac K_bd + K_ad K_bc) for F_ab = e_a e_bᵀ + e_b e_aᵀ, and E_ab = F_ab s_ab/2]."""
    a, b, g = _pairs(U.shape[1])
    scale = jnp.asarray(g[:, None] * g[None, :] / 2)

    def one(x):
        K = _projected(prob, theta, x, U)
        return scale * (K[a][:, a] * K[b][:, b] + K[a][:, b] * K[b][:, a])

    return prob.examples().expectation(one, chunk=chunk)


@eqx.filter_jit
def _moment_apply(prob: Problem, theta: Theta, U: Array, C: Float[Array, "q r r"], chunk: int) -> Array:
    """Σ_i w_i K_i C_j K_i for each matrix C_j of the block: one pass over the examples, r Hessian-vector products
    per example, no example's Hessian kept beyond its chunk."""

    def one(x):
        K = _projected(prob, theta, x, U)
        return jnp.einsum("ab,qbc,cd->qad", K, C, K)

    return prob.examples().expectation(one, chunk=chunk)


def _svec(C: np.ndarray) -> np.ndarray:
    """(…, r, r) symmetric → (…, m) coordinates in the orthonormal basis of ``_pairs`` (C_aa; √2 C_ab)."""
    a, b, g = _pairs(C.shape[-1])
    return C[..., a, b] * g


def _smat(v: np.ndarray, r: int) -> np.ndarray:
    """The inverse of ``_svec``: (…, m) → (…, r, r)."""
    a, b, g = _pairs(r)
    C = np.zeros((*v.shape[:-1], r, r))
    C[..., a, b] = v / g
    C[..., b, a] = v / g
    return C


@dataclass(frozen=True)
class _Curvature:
    """H = E_i H_i at θ*: eigenvalues ``lam`` (r,) > 0 on its range with eigenvectors ``U`` (d, r), the flat
    directions ``null`` (d, k), the sharpness λ_max, and whether the examples' Hessians act on the flat
    directions (``curved``), with λ_max(E_i N_i²) and λ_max(E_i J_iᵀJ_i) (``along``, ``across``: 0 without flat
    directions or where not computed). ``sums`` and ``harmonic`` (m,) are λ_a + λ_b and λ_aλ_b/(λ_a + λ_b) over
    the pairs a ≤ b: A, and M at p = 0, in the scaled coordinates."""

    lam: np.ndarray
    U: np.ndarray
    null: np.ndarray
    sharpness: float
    curved: bool
    along: float = 0.0
    across: float = 0.0

    @property
    def rank(self) -> int:
        return self.lam.shape[0]

    @functools.cached_property
    def sums(self) -> np.ndarray:
        a, b, _ = _pairs(self.rank)
        return self.lam[a] + self.lam[b]

    @functools.cached_property
    def harmonic(self) -> np.ndarray:
        a, b, _ = _pairs(self.rank)
        return self.lam[a] * self.lam[b] / self.sums


def _curvature(prob: Problem, theta: Theta, n: int, saddle_tol: float, refine: bool) -> _Curvature:
    """H's eigenbasis at θ*, split into range and flat directions; ValueError when θ* has negative curvature beyond
    saddle_tol·ρ (not a minimum) or H = 0. ``refine``: check whether the examples' Hessians act on the flat
    directions (one pass; needed only for p > 0)."""
    d = ravel_pytree(theta)[0].shape[0]
    H = np.asarray(_mean_hessian(prob, theta, _chunk_for(n, d * d)))
    lam, V = np.linalg.eigh((H + H.T) / 2)
    rho = max(abs(lam[0]), abs(lam[-1]))
    if rho == 0:
        raise ValueError("theta_star has H = ∇²L = 0: every direction is flat, and there is no step-size condition")
    if negative(lam, lam[:1], lam[-1:], saddle_tol).any():
        raise ValueError(
            f"theta_star is not a minimum: ∇²L has λ_min = {lam[0]:.6g} < −saddle_tol·ρ = {-saddle_tol * rho:.3g} "
            f"(ρ = max|λ| = {rho:.6g}, saddle_tol = {saddle_tol:g}); SGD's linear stability is defined at a minimum"
        )
    kept = lam > saddle_tol * rho
    if not refine or kept.all():
        return _Curvature(lam[kept], V[:, kept], V[:, ~kept], float(lam[-1]), False)
    moments = _flat_moments(prob, theta, jnp.asarray(V[:, kept]), jnp.asarray(V[:, ~kept]), _chunk_for(n, d * d))
    along, across, rest = (np.asarray(m) for m in moments)
    leak = float(np.trace(along) + np.trace(across))
    curved = leak > saddle_tol**2 * (leak + float(rest))
    top = [float(np.linalg.eigvalsh((m + m.T) / 2)[-1]) for m in (along, across)]
    return _Curvature(lam[kept], V[:, kept], V[:, ~kept], float(lam[-1]), curved, *top)


Apply = Callable[[np.ndarray], np.ndarray]
"""A linear map known by its action on the columns of a block (m, q)."""


class AbstractPencilSolver(eqx.Module):
    """How the pencil's largest eigenvalue and its linear systems are computed (``DensePencil``,
    ``MatrixFreePencil``). Subclasses implement the examples' part of Q, the largest eigenvalue of a symmetric map
    and the solution of a positive definite system, each on vectors of m = r(r+1)/2 coordinates of symmetric
    r × r matrices (r the rank of H)."""

    @abc.abstractmethod
    def moment(self, prob: Problem, theta: Theta, curv: _Curvature, n: int) -> Apply:
        """v ↦ svec(Σ_i w_i K_i smat(v) K_i) on the columns of a block, K_i = Uᵀ H_i U."""

    @abc.abstractmethod
    def largest(self, apply: Apply, m: int) -> tuple[float, bool, int]:
        """(μ_max, converged, passes) of the symmetric m × m matrix ``apply`` acts as."""

    @abc.abstractmethod
    def solve(self, apply: Apply, m: int, rhs: np.ndarray) -> tuple[np.ndarray, bool]:
        """(x, converged) with apply(x) = rhs, ``apply`` symmetric positive definite."""


class DensePencil(AbstractPencilSolver):
    """Forms the matrix of the pencil, m × m with m = r(r+1)/2 for H's rank r, from Σ_i w_i K_i ⊗ K_i (one pass,
    m² numbers per example in a chunk), and takes its eigenvalues and solves with LAPACK: O(m³) = O(r⁶) time."""

    def moment(self, prob: Problem, theta: Theta, curv: _Curvature, n: int) -> Apply:
        d, m = curv.U.shape[0], curv.sums.shape[0]
        S = np.asarray(_moment_matrix(prob, theta, jnp.asarray(curv.U), _chunk_for(n, m * m + d * curv.rank)))
        S = (S + S.T) / 2
        return lambda V: S @ V

    def largest(self, apply: Apply, m: int) -> tuple[float, bool, int]:
        M = apply(np.eye(m))
        return float(np.linalg.eigvalsh((M + M.T) / 2)[-1]), True, 0

    def solve(self, apply: Apply, m: int, rhs: np.ndarray) -> tuple[np.ndarray, bool]:
        return np.linalg.solve(apply(np.eye(m)), rhs), True


class MatrixFreePencil(AbstractPencilSolver):
    """Never forms the pencil: each pass over the examples takes r Hessian-vector products H_i u per example along
    H's range and applies K_i C K_i to a block of matrices C. The largest eigenvalue comes from ``block_krylov``
    (blocks of 1 + OVERSAMPLE vectors of length m), a linear system from conjugate gradients (one pass per step).

    **Arguments:**

    - ``rtol``: Krylov stops when the residual ‖Mu − μu‖ ≤ rtol·μ (μ is then accurate to about residual²/gap);
      conjugate gradients when ‖r‖ ≤ rtol·‖rhs‖.
    - ``max_passes``: the most passes of either; a solve not converged by then warns.
    - ``seed``: the Krylov starting block.
    """

    rtol: float = 1e-8
    max_passes: int = 100
    seed: int = 0

    def __check_init__(self) -> None:
        _validate.positive("rtol", self.rtol)
        _validate.int_at_least("max_passes", self.max_passes, 1)
        _validate.seed("seed", self.seed)

    def moment(self, prob: Problem, theta: Theta, curv: _Curvature, n: int) -> Apply:
        r, d = curv.rank, curv.U.shape[0]
        width = min(curv.sums.shape[0], 1 + OVERSAMPLE)  # every block padded to one width: one compiled pass
        chunk, U = _chunk_for(n, d * r + width * r * r), jnp.asarray(curv.U)

        def apply(V: np.ndarray) -> np.ndarray:
            q = V.shape[1]
            blocks = _smat(np.pad(V, ((0, 0), (0, width - q))).T, r)
            return _svec(np.asarray(_moment_apply(prob, theta, U, jnp.asarray(blocks), chunk))).T[:, :q]

        return apply

    def largest(self, apply: Apply, m: int) -> tuple[float, bool, int]:
        found = block_krylov(apply, m, 1, self.rtol, self.max_passes, self.seed)
        return float(found.values[0]), found.converged, found.passes

    def solve(self, apply: Apply, m: int, rhs: np.ndarray) -> tuple[np.ndarray, bool]:
        x, r = np.zeros(m), rhs.copy()
        p, rr, goal = r.copy(), r @ r, (self.rtol * np.linalg.norm(rhs)) ** 2
        for _ in range(self.max_passes):
            if rr <= goal:
                return x, True
            Ap = apply(p[:, None])[:, 0]
            alpha = rr / (p @ Ap)
            x, r = x + alpha * p, r - alpha * Ap
            rr, rr_old = r @ r, rr
            p = r + (rr / rr_old) * p
        return x, bool(rr <= goal)


def _pencil(moment: Apply, curv: _Curvature, p: float) -> Apply:
    """V ↦ M_p V, M_p = A^{-1/2} Q_p A^{-1/2} in the scaled coordinates of H's range:
    (1 − p) λ_aλ_b/(λ_a + λ_b) v + p D^{-1/2} S D^{-1/2} v with D = λ_a + λ_b and S the examples' part."""
    root = np.sqrt(curv.sums)[:, None]

    def apply(V: np.ndarray) -> np.ndarray:
        out = (1.0 - p) * curv.harmonic[:, None] * V
        return out + p * moment(V / root) / root if p else out

    return apply


def _non_uniformity(moment: Apply, curv: _Curvature, saddle_tol: float) -> float:
    """s = √(E_i ‖P(H_i − H)P‖²_F / k), P the projector onto H's top eigenspace (dimension k: eigenvalues within
    saddle_tol·λ_max of λ_max): the spread of the examples' curvatures along the sharpest directions; for k = 1,
    s² = Var_i(vᵀH_i v), v the top eigenvector."""
    top = curv.lam >= curv.sharpness * (1.0 - saddle_tol)
    P = np.diag(top.astype(float))
    v = _svec(P)[:, None]
    k, a = int(top.sum()), curv.sharpness
    spread = float((v.T @ moment(v))[0, 0]) / k - a * a  # E_i ‖P K_i P‖²_F / k − λ_max²
    return float(np.sqrt(max(spread, 0.0)))


@dataclass(frozen=True)
class SGDStability:
    """SGD's step-size condition at a minimum θ* (``mean_square_stability``; docs/sgd.md, "SGD's step-size condition").

    Per batch size B (arrays of the length of ``batches``):

    - ``thresholds``: η*(B), the largest step at which linearised SGD is mean-square stable at θ* (E‖θ_t − θ*‖²
      bounded for every start); ``factors``: p = c_B, the chance of a one-example step in the equivalent mixture.
    - ``necessary``: 2λ_max/(λ_max² + p s²), the largest η meeting the necessary condition
      (1 − ηλ_max)² + η² p s² ≤ 1 (so η*(B) ≤ ``necessary``), which implies η ≤ 2/λ_max and s ≤ 1/(η√p)
      (s ≤ √B/η with replacement).

    And at θ*:

    - ``sharpness``: λ_max(H); ``gd_threshold``: 2/λ_max, GD's condition (η*(B) ≤ 2/λ_max, equal where p = 0).
    - ``non_uniformity``: s = √(E_i ‖P(H_i − H)P‖²_F / k), P the projector onto H's top eigenspace of dimension k;
      for a simple λ_max, the standard deviation of the examples' curvatures vᵀH_i v along H's top eigenvector.
    - ``flat``: the number of flat directions of H (|λ| ≤ saddle_tol·ρ); ``flat_curved``: whether the examples'
      Hessians act on them, which makes η* = 0 wherever p > 0 (module docstring): θ* lies on a valley of minima.
    - ``converged``: every iterative solve met its tolerance (always, for ``DensePencil``); ``passes``: the passes
      over the examples each threshold took (η*_⊥(B) where ``flat_curved``; 0: none, ``DensePencil`` or closed form).
    - ``batches``, ``replace``, ``n``: the sampling; ``dim``: d, the number of parameters.

    Across and along the flat directions N (a valley of minima; module docstring, docs/sgd.md "Flat directions"),
    with N_i = VᵀH_iV and J_i = UᵀH_iV the blocks of the examples' Hessians on N and between H's range and N:

    - ``transverse_thresholds``: η*_⊥(B) per B, the threshold of the motion across the valley with the valley
      coordinate frozen: linearised SGD with the H_i compressed to H's range, K_i = UᵀH_iU, is mean-square stable
      for η ≤ η*_⊥(B). It is ``thresholds`` itself wherever that is not set to 0 by ``flat_curved``; never above
      2/λ_max nor ``necessary``, and non-decreasing in B.
    - ``valley_curvature``: λ_max(E_i N_i²); from an offset z along N, one step gives
      E‖P_N δ‖² = ‖z‖² + η²p zᵀ(E_i N_i²)z, so at most (1 + η²p·``valley_curvature``)‖z‖².
    - ``valley_coupling``: λ_max(E_i J_iᵀJ_i); the same step kicks the offset across the valley to
      E‖P_R δ‖² = η²p zᵀ(E_i J_iᵀJ_i)z, at most η²p·``valley_coupling``·‖z‖².
    - ``valley_diffusion``: c_B tr(VᵀΣV) per B, Σ the covariance of one example's gradient at θ*: from θ* one step
      gives E‖P_N δ‖² = η²·``valley_diffusion``, the gradient noise along the valley.

    All three valley fields are 0 without flat directions, or where every B is the whole data set (p = 0).

    ``covariance(eta, batch)`` gives the asymptotic covariance of SGD's iterates at a stable step.
    """

    batches: np.ndarray
    replace: bool | None
    factors: np.ndarray
    thresholds: np.ndarray
    necessary: np.ndarray
    sharpness: float
    gd_threshold: float
    non_uniformity: float
    flat: int
    flat_curved: bool
    transverse_thresholds: np.ndarray
    valley_curvature: float
    valley_coupling: float
    valley_diffusion: np.ndarray
    converged: bool
    passes: np.ndarray
    n: int
    dim: int
    prob: Problem = field(repr=False)
    theta: Theta = field(repr=False)
    solver: AbstractPencilSolver = field(repr=False)
    curvature: _Curvature = field(repr=False)
    moment: Apply = field(repr=False)
    saddle_tol: float = field(repr=False)

    def covariance(self, eta: float, batch: int) -> Float[np.ndarray, "d d"]:
        """C_∞ = lim E[(θ_t − θ*)(θ_t − θ*)ᵀ] for linearised SGD at step η < η*(B): the fixed point
        C = T_η(C) + η² c_B Σ(θ*), Σ the covariance of one example's gradient at θ* (``gradient_noise``), over the
        flattened θ. On H's range it solves (A − ηQ)C = η c_B Σ; between range and flat directions
        C_ak = η c_B Σ_ak/λ_a; along the flat directions the noise must vanish (else the iterates diffuse there,
        with no stationary covariance: ValueError), and C is 0 there. At an interpolating minimum (every example's
        gradient 0) C_∞ = 0.

        **Arguments:**

        - ``eta``: the step, 0 < η < η*(B).
        - ``batch``: B, one of ``batches``.
        """
        hits = np.flatnonzero(self.batches == batch) if not isinstance(batch, bool) else np.zeros(0, int)
        if len(hits) == 0:
            raise ValueError(f"batch={batch!r} is invalid: must be one of the batches {self.batches.tolist()}")
        p, eta_star = float(self.factors[hits[0]]), float(self.thresholds[hits[0]])
        eta = _validate.positive("eta", eta)
        if not eta < eta_star:
            raise ValueError(f"eta={eta!r} is out of range: must be in (0, η*(B) = {eta_star:.6g}) for B = {batch}")
        sigma = gradient_noise(self.prob, self.theta, batch=int(batch), replace=self.replace).covariance
        curv, null = self.curvature, self.curvature.null
        if null.shape[1] and np.linalg.norm(null.T @ sigma @ null) > self.saddle_tol * np.linalg.norm(sigma):
            raise ValueError(
                f"the gradient noise at theta_star has a component along the {null.shape[1]} flat direction(s) of H: "
                "SGD's iterates diffuse along them and have no stationary covariance"
            )
        root = np.sqrt(curv.sums)
        pencil = _pencil(self.moment, curv, p)
        rhs = eta * _svec(curv.U.T @ sigma @ curv.U) / root
        y, converged = self.solver.solve(lambda V: V - eta * pencil(V), rhs.shape[0], rhs)
        if not converged:
            warnings.warn(f"SGDStability.covariance: {self.solver!r} did not converge; raise max_passes", stacklevel=2)
        mixed = curv.U @ (eta * (curv.U.T @ sigma @ null) / curv.lam[:, None]) @ null.T
        C = curv.U @ _smat(y / root, curv.rank) @ curv.U.T + mixed + mixed.T
        return (C + C.T) / 2


def _batches(batch) -> tuple[np.ndarray, bool]:
    """(the batch sizes as a 1-D array, whether one was given as a scalar); ValueError for an empty or nested one."""
    if isinstance(batch, (int, np.integer)) or np.ndim(batch) == 0:
        return np.asarray([batch], dtype=object), True
    values = np.asarray(batch, dtype=object)
    if values.ndim != 1 or values.size == 0:
        raise ValueError(f"batch={batch!r} is invalid: must be an integer >= 1 or a non-empty 1-D array of them")
    return values, False


def _transverse(
    solver: AbstractPencilSolver, moment: Apply, curv: _Curvature, factors: np.ndarray
) -> tuple[np.ndarray, np.ndarray, bool]:
    """(η*_⊥(B), passes, converged) per p = c_B: 1/μ_max of the pencil on H's range (GD's 2/λ_max where p = 0), the
    mean-square threshold of the motion across the flat directions; η*(B) itself where the H_i do not act on them."""
    thresholds, passes, converged = np.empty(len(factors)), np.zeros(len(factors), int), True
    for j, p in enumerate(factors):
        if p == 0:  # GD's closed form
            thresholds[j] = 2.0 / curv.sharpness
            continue
        mu, ok, passes[j] = solver.largest(_pencil(moment, curv, float(p)), curv.sums.shape[0])
        thresholds[j], converged = 1.0 / mu, converged and ok
    return thresholds, passes, converged


def _flat_noise(prob: Problem, theta: Theta, curv: _Curvature) -> float:
    """tr(VᵀΣV): the variance of one example's gradient along H's flat directions V (0 without them), a sum of
    squares (clipped at 0 against rounding)."""
    if not curv.null.shape[1]:
        return 0.0
    return max(float(np.sum(curv.null * gradient_noise(prob, theta).matvec(curv.null))), 0.0)


def _pick_solver(solver: AbstractPencilSolver | None, rank: int) -> AbstractPencilSolver:
    if solver is None:
        return DensePencil() if rank <= DENSE_MAX_RANK else MatrixFreePencil()
    if not isinstance(solver, AbstractPencilSolver):
        raise ValueError(f"solver={solver!r} is invalid: must be None, DensePencil() or MatrixFreePencil(...)")
    return solver


def mean_square_stability(
    prob: Problem,
    theta_star: ThetaLike,
    batch: int | Sequence[int] | ArrayLike,
    replace: bool | None = True,
    *,
    saddle_tol: float = 1e-7,
    solver: AbstractPencilSolver | None = None,
) -> SGDStability:
    """SGD's exact mean-square step-size condition at a minimum θ*, for one or several batch sizes (module
    docstring; docs/sgd.md, "SGD's step-size condition"): η*(B) = 1/μ_max(M_p), M_p = A^{-1/2}Q_p A^{-1/2}, beside
    GD's 2/λ_max, the non-uniformity s and its necessary condition; on a valley of minima, where η*(B) = 0, the
    threshold across it η*_⊥(B) and the motion along it. The examples' Hessians enter once for all B.

    **Arguments:**

    - ``prob``: a Problem that declares its examples (``Problem.from_examples``); any other raises ValueError.
    - ``theta_star``: one (unbatched) θ at a minimum of L: no Hessian eigenvalue below −saddle_tol·ρ, else
      ValueError (the gradient is not checked: give a converged point).
    - ``batch``: B, an integer ≥ 1, or a 1-D array of them (≤ n without replacement).
    - ``replace``: True (i.i.d. draws, p = 1/B), None (online draws, the same), False (a B-subset of n equally
      weighted examples, p = (n − B)/(B(n − 1))); as ``gradient_noise``.
    - ``saddle_tol``: the relative tolerance that tells negative and zero curvature, as the dynamics' status.
    - ``solver``: ``DensePencil()``, ``MatrixFreePencil(rtol, max_passes, seed)``, or None: ``DensePencil`` up to rank
      ``DENSE_MAX_RANK`` of H, ``MatrixFreePencil`` above. θ may have at most ``MAX_DIM`` parameters.
    """
    measure = check_measure("prob.examples()", checked(prob).examples())
    values, _ = _batches(batch)
    sampled = [_check_sampling(b, replace, measure) for b in values]
    n, factors = sampled[0][0], np.array([f for _, f in sampled])
    saddle_tol = _validate.positive("saddle_tol", saddle_tol)
    theta = _unbatched(prob, theta_star, "theta_star", "mean_square_stability")
    d = ravel_pytree(theta)[0].shape[0]
    if d > MAX_DIM:
        raise ValueError(f"theta_star has d = {d} parameters: mean_square_stability takes at most MAX_DIM = {MAX_DIM}")
    sampled_p = bool(np.any(factors > 0))
    curv = _curvature(prob, theta, n, saddle_tol, refine=sampled_p)
    solver = _pick_solver(solver, curv.rank)
    moment = solver.moment(prob, theta, curv, n)
    transverse, passes, converged = _transverse(solver, moment, curv, factors)
    thresholds = np.where(curv.curved & (factors > 0), 0.0, transverse)  # no stable step where p > 0
    flat_noise = _flat_noise(prob, theta, curv) if sampled_p else 0.0
    if not converged:
        warnings.warn(
            f"mean_square_stability: {solver!r} did not converge for every batch; raise max_passes", stacklevel=2
        )
    if curv.curved and sampled_p:
        warnings.warn(
            f"the examples' Hessians act on the {curv.null.shape[1]} flat direction(s) of H at theta_star: SGD is "
            "mean-square unstable there at every step size (η* = 0) unless the minibatch is the whole data set; "
            "across this valley of minima it is stable for η ≤ η*_⊥(B) (transverse_thresholds)",
            stacklevel=2,
        )
    s = _non_uniformity(moment, curv, saddle_tol)
    a = curv.sharpness
    return SGDStability(
        batches=values.astype(int), replace=None if replace is None else bool(replace), factors=factors,
        thresholds=thresholds, necessary=2 * a / (a * a + factors * s * s), sharpness=a, gd_threshold=2.0 / a,
        non_uniformity=s, flat=curv.null.shape[1], flat_curved=curv.curved, transverse_thresholds=transverse,
        valley_curvature=curv.along, valley_coupling=curv.across, valley_diffusion=factors * flat_noise,
        converged=converged, passes=passes,
        n=n, dim=d, prob=prob, theta=theta, solver=solver, curvature=curv, moment=moment, saddle_tol=saddle_tol,
    )  # fmt: skip


def sgd_threshold(
    prob: Problem,
    theta_star: ThetaLike,
    batch: int | Sequence[int] | ArrayLike,
    replace: bool | None = True,
    *,
    saddle_tol: float = 1e-7,
    solver: AbstractPencilSolver | None = None,
) -> float | np.ndarray:
    """η*(B): the largest step at which linearised minibatch SGD is mean-square stable at the minimum θ*
    (``mean_square_stability``'s ``thresholds``): a float for one B, an array for an array of B. It is GD's 2/λ_max
    where the minibatch is the whole data set (B = n without replacement), and smaller, non-decreasing in B,
    otherwise.

    **Arguments:** as ``mean_square_stability``.
    """
    _, scalar = _batches(batch)
    found = mean_square_stability(prob, theta_star, batch, replace, saddle_tol=saddle_tol, solver=solver)
    return float(found.thresholds[0]) if scalar else found.thresholds
