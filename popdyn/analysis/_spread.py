"""SGD's spread around the gradient-descent path, to first order in the offset (docs/sgd.md, "SGD's spread around
the GD path").

GD moves θ_{t+1} = θ_t − η ∇L(θ_t); SGD from the same θ_0 moves θ'_{t+1} = θ'_t − η ĝ_B(θ'_t), ĝ_B the mean gradient
of a fresh minibatch of B examples. Their offset δ_t = θ'_t − θ_t moves by

    δ_{t+1} = δ_t − η [ĝ_B(θ_t + δ_t) − ∇L(θ_t)] = (I − ηĤ_B) δ_t − η ξ_t − (η/2) ∇³ℓ_B(θ_t)[δ_t, δ_t] − …,

with ξ_t = ĝ_B(θ_t) − ∇L(θ_t) (mean 0, covariance c_B Σ(θ_t)) and Ĥ_B the minibatch mean of the examples' Hessians
H_i(θ_t), both drawn at step t, independently of δ_t.

**First order** keeps the linear recursion δ ← (I − ηĤ_B)δ − ηξ. Its mean stays 0 (E δ_{t+1} = (I − ηH) E δ_t, δ_0 = 0),
so the cross term E[(I − ηĤ_B) δ_t ξ_tᵀ] = E_B[(I − ηĤ_B) E[δ_t] ξ_Bᵀ] vanishes (independence alone would not do:
Ĥ_B and ξ_B come from one minibatch and are correlated), and its covariance follows exactly

    C_{t+1} = E[(I − ηĤ_B) C_t (I − ηĤ_B)] + η² c_B Σ(θ_t)
            = C_t − η(H C_t + C_t H) + η² [(1 − p) H C_t H + p Σ_i w_i H_i C_t H_i] + η² p Σ(θ_t),   C_0 = 0,

p = c_B (``minibatch_factor``), all at θ_t: docs/sgd.md's T_η along the path instead of at a minimum.

**Orders.** Over a fixed time s = ηt, δ is O(√η): C_t = O(η). The quadratic term of the step gives the offset a mean
m_t = E δ_t = O(η) [derived: E of the expansion above, δ_t independent of step t's minibatch],

    m_{t+1} = (I − ηH) m_t − (η/2) ∇³L(θ_t)[C_t],   m_0 = 0,

(m_t = O(η³t²) after t steps). With the third moments of δ (O(η²)) it changes E‖δ_t‖² by a relative O(η):
E‖θ'_t − θ_t‖² = tr C_t (1 + O(η)), the examples' Hessian spread p(Σ_i w_i H_i C H_i − HCH) being itself of that
order. Where every ℓ(·, x_i) is quadratic δ follows the linear recursion exactly: m_t = 0 and E[δ_t δ_tᵀ] = C_t at
every η. The excess loss is E L(θ'_t) − L(θ_t) = ∇L(θ_t)·m_t + ½ tr(H_t C_t) + O(η²): away from a critical point
both terms are O(η), so the drift term is kept [∇³L[C] = ∇_θ tr(∇²L(θ) C), by reverse mode through Hessian-vector
products].
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree
from jaxtyping import Array, Float, Int

from popdyn import _validate
from popdyn._batching import checked
from popdyn.analysis._noise import (
    Eigenpairs,
    _check_sampling,
    _chunk_for,
    _example_gradient,
    _rayleigh_ritz,
    _unbatched,
)
from popdyn.analysis._sgd_stability import _example_hessian_times
from popdyn.problem import Problem, Theta, ThetaLike, check_measure

SPREAD_MAX_DIM = 512
"""The most parameters d ``sgd_spread`` takes: C is a dense d × d matrix, and every step forms each example's Hessian
(d Hessian-vector products) and H_i C H_i (2d³ operations)."""


@dataclass(frozen=True)
class SGDSpread:
    """SGD's spread around the GD path, to first order in the offset (``sgd_spread``; docs/sgd.md).

    At the recorded steps t = 0, k, 2k, …, ``steps`` (arrays with that leading axis):

    - ``ts``: the steps t; ``path``: θ_t of GD with step η (θ's pytree, leading axis the records); ``loss``: L(θ_t).
    - ``expected_sq_distance``: tr C_t, the first-order E‖θ_SGD,t − θ_t‖² of SGD from the same θ_0.
    - ``expected_excess_loss``: ∇L(θ_t)·m_t + ½ tr(H_t C_t), the first-order E L(θ_SGD,t) − L(θ_t).
    - ``mean_offset`` (records, d): m_t, the first-order E[θ_SGD,t − θ_t] over the flattened θ (``unravel``).

    At the end:

    - ``covariance`` (d, d): C_steps; ``top``: its ``top`` largest eigenpairs (``Eigenpairs``), or None.

    And the sampling: ``lr`` η, ``batch`` B, ``replace``, ``factor`` p = c_B, ``n`` the number of examples.
    """

    ts: Int[np.ndarray, " R"]
    path: Theta
    loss: Float[np.ndarray, " R"]
    expected_sq_distance: Float[np.ndarray, " R"]
    expected_excess_loss: Float[np.ndarray, " R"]
    mean_offset: Float[np.ndarray, "R d"]
    covariance: Float[np.ndarray, "d d"]
    top: Eigenpairs | None
    lr: float
    batch: int
    replace: bool | None
    factor: float
    n: int
    unravel: Callable = field(repr=False)


def _example_moments(prob: Problem, theta: Theta, g: Array, C: Array, chunk: int) -> tuple[Array, ...]:
    """(E c_i, E c_i c_iᵀ, H = E H_i, E H_i C H_i), c_i = g_i − g: one pass over the examples, each example's Hessian
    H_i formed by d Hessian-vector products and kept no longer than its chunk."""
    eye = jnp.eye(g.shape[0], dtype=g.dtype)

    def one(x):
        c = _example_gradient(prob, theta, x) - g
        H = _example_hessian_times(prob, theta, x, eye)
        H = (H + H.T) / 2
        return c, c[:, None] * c[None, :], H, H @ C @ H

    return prob.examples().expectation(one, chunk=chunk)


def _curvature_gradient(loss: Callable[[Array], Array], phi: Array, C: Array) -> Array:
    """∇³L(θ)[C] = ∇_θ tr(∇²L(θ) C), C symmetric: reverse mode through the d Hessian-vector products ∇²L C."""
    grad = jax.grad(loss)

    def trace(p):
        HC = jax.vmap(lambda c: jax.jvp(grad, (p,), (c,))[1], in_axes=1, out_axes=1)(C)
        return jnp.trace(HC)

    return jax.grad(trace)(phi)


def _local(prob: Problem, unravel: Callable, phi: Array, C: Array, chunk: int) -> tuple[Array, ...]:
    """At θ_t (flat ``phi``) with C_t: (L, ∇L, H, Σ, E H_i C H_i, ∇³L[C]); Σ = E c cᵀ − (E c)(E c)ᵀ, exact for the
    centre g = ∇L (of ``prob.loss``, the gradient GD steps along), which equals E g_i to rounding."""
    loss = lambda p: prob.loss(unravel(p))  # noqa: E731
    value, g = jax.value_and_grad(loss)(phi)
    shift, second, H, M = _example_moments(prob, unravel(phi), g, C, chunk)
    sigma = second - shift[:, None] * shift[None, :]
    return value, g, H, sigma, M, _curvature_gradient(loss, phi, C)


@eqx.filter_jit
def _propagate(prob: Problem, theta: Theta, lr: Array, p: Array, records: int, every: int, chunk: int) -> tuple:
    """GD's path and (C_t, m_t) along it in one ``lax.scan`` over ``records`` blocks of ``every`` steps: the records
    (θ_t, L, tr C_t, excess loss, m_t) at t = 0, every, …, records·every, and C at the end."""
    phi0, unravel = ravel_pytree(theta)
    d = phi0.shape[0]

    def step(carry, _):
        phi, C, m = carry
        value, g, H, sigma, M, D = _local(prob, unravel, phi, C, chunk)
        HC = H @ C
        C_next = C - lr * (HC + HC.T) + lr**2 * ((1 - p) * (HC @ H) + p * M + p * sigma)
        m_next = m - lr * (H @ m) - 0.5 * lr * D
        record = (value, jnp.trace(C), g @ m + 0.5 * jnp.sum(H * C))
        return (phi - lr * g, (C_next + C_next.T) / 2, m_next), record

    def block(carry, _):
        out, recs = jax.lax.scan(step, carry, None, length=every)
        return out, (carry[0], carry[2], *(r[0] for r in recs))

    zero = jnp.zeros((d, d), phi0.dtype)
    (phi, C, m), recs = jax.lax.scan(block, (phi0, zero, jnp.zeros_like(phi0)), None, length=records)
    value, g, H, *_ = _local(prob, unravel, phi, C, chunk)
    last = (phi, m, value, jnp.trace(C), g @ m + 0.5 * jnp.sum(H * C))
    out = tuple(jnp.concatenate([r, x[None]]) for r, x in zip(recs, last, strict=True))
    return jax.vmap(unravel)(out[0]), *out[1:], C


def sgd_spread(
    prob: Problem,
    theta0: ThetaLike,
    *,
    lr: float,
    batch: int,
    steps: int,
    replace: bool | None = True,
    record_every: int = 1,
    top: int = 0,
) -> SGDSpread:
    """How far minibatch SGD strays from GD's path, to first order in the offset (module docstring; docs/sgd.md):
    the covariance C_t of θ_SGD,t − θ_GD,t, from C_{t+1} = E[(I − ηĤ_B) C_t (I − ηĤ_B)] + η² c_B Σ(θ_t), C_0 = 0, with
    the mean offset m_t, along GD's own path from θ_0, in one compiled ``lax.scan`` over the steps. Each step is one
    pass over the examples (their gradients and Hessians at θ_t, in chunks) and ∇³L[C_t].

    **Arguments:**

    - ``prob``: a Problem that declares its examples (``Problem.from_examples``); any other raises ValueError.
    - ``theta0``: one (unbatched) θ_0, the start of both GD and SGD; at most ``SPREAD_MAX_DIM`` parameters.
    - ``lr``: the step η > 0 of both.
    - ``batch``: B, an integer ≥ 1 (≤ n without replacement).
    - ``replace``: True (i.i.d. draws, p = 1/B), None (online draws, the same), False (a B-subset of n equally
      weighted examples, p = (n − B)/(B(n − 1))); as ``gradient_noise``.
    - ``steps``: the number of steps, ≥ 1; ``record_every``: records at every ``record_every``-th step (it must
      divide ``steps``).
    - ``top``: how many of C's largest eigenpairs to give at the end, an integer in [0, d].

    A GD path or a C_t that turns non-finite warns and gives its records as they are (NaN or inf).
    """
    measure = check_measure("prob.examples()", checked(prob).examples())
    n, factor = _check_sampling(_validate.int_at_least("batch", batch, 1), replace, measure)
    lr = _validate.positive("lr", lr)
    steps = _validate.int_at_least("steps", steps, 1)
    every = _validate.int_at_least("record_every", record_every, 1)
    if steps % every:
        raise ValueError(f"steps={steps} is invalid: must be a multiple of record_every={every}")
    theta = _unbatched(prob, theta0, "theta0", "sgd_spread")
    flat, unravel = ravel_pytree(theta)
    d = flat.shape[0]
    if d > SPREAD_MAX_DIM:
        raise ValueError(f"theta0 has d = {d} parameters: sgd_spread takes at most SPREAD_MAX_DIM = {SPREAD_MAX_DIM}")
    top = _validate.int_at_least("top", top, 0)
    if top > d:
        raise ValueError(f"top={top} is out of range: must be an integer in [0, d] = [0, {d}]")
    dtype = flat.dtype
    path, offsets, loss, sq, excess, C = _propagate(
        prob, theta, jnp.asarray(lr, dtype), jnp.asarray(factor, dtype), steps // every, every, _chunk_for(n, 5 * d * d)
    )
    sq, excess, C = np.asarray(sq), np.asarray(excess), np.asarray(C)
    _warn_non_finite(np.asarray(offsets), sq, excess, every)
    return SGDSpread(
        ts=np.arange(steps // every + 1) * every, path=path, loss=np.asarray(loss), expected_sq_distance=sq,
        expected_excess_loss=excess, mean_offset=np.asarray(offsets), covariance=C, top=_top(C, top), lr=lr,
        batch=int(batch), replace=None if replace is None else bool(replace), factor=factor, n=n, unravel=unravel,
    )  # fmt: skip


def _top(C: np.ndarray, k: int) -> Eigenpairs | None:
    """The k largest eigenpairs of the dense C (LAPACK; residuals ‖Cu − λu‖), or None for k = 0."""
    if k == 0 or not np.all(np.isfinite(C)):
        return None
    values, vectors, residuals = _rayleigh_ritz(np.eye(C.shape[0]), C, C, k)
    return Eigenpairs(values, vectors, residuals, True, 0)


def _warn_non_finite(offsets: np.ndarray, sq: np.ndarray, excess: np.ndarray, every: int) -> None:
    """Warn at the first record where the path's records or C_t stopped being finite."""
    ok = np.isfinite(sq) & np.isfinite(excess) & np.all(np.isfinite(offsets), axis=1)
    if not ok.all():
        first = int(np.argmin(ok)) * every
        warnings.warn(
            f"sgd_spread: the GD path or C_t is not finite from step {first} on (GD diverged, or SGD's spread grew "
            "past the floating-point range): the records from there are NaN or inf",
            stacklevel=3,
        )
