"""Per-sample losses and stochastic gradients on exact draws of the generative model (docs/models/scb.md §5).

For a draw (X, k = x_{T+1}, y) and the residual r = e_y − V X a_k: g_V = −r (X a_k)ᵀ and g_{a_k} = −XᵀVᵀr
(other columns of A: 0). Preconditioned as in §4 their expectation is the preconditioned population
gradient. ``data`` is the triple returned by ``SparseBigram.sample``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Int

from popdyn.problem import Theta

if TYPE_CHECKING:  # the model's per-example loss uses ``draw_residual``
    from popdyn.tasks.scb._model import SparseBigram

Batch = tuple[Int[Array, "B T"], Int[Array, " B"], Int[Array, " B"]]


def draw_residual(prob: SparseBigram, theta: Theta, X, k, y):
    """(r = e_y − V X a_k, X a_k) for one draw (X the T context tokens, k the last token, y the next token).

    **Arguments:** ``prob`` the ``SparseBigram`` instance; ``theta`` {"V", "A"}; ``X``, ``k``, ``y`` the draw.
    """
    h = jnp.zeros(prob.N, theta["V"].dtype).at[X].add(theta["A"][:, k])
    return jax.nn.one_hot(y, prob.N, dtype=h.dtype) - theta["V"] @ h, h


@eqx.filter_jit
def per_sample_loss(prob: SparseBigram, theta: Theta, data: Batch) -> Float[Array, " B"]:
    """½‖e_y − V X a_k‖² for every draw; its mean is an unbiased estimate of L(θ) (§2).

    **Arguments:**

    - ``prob``: the ``SparseBigram`` instance.
    - ``theta``: the state {"V": N × N, "A": T × N}.
    - ``data``: B draws (X: (B, T) context tokens, k: (B,) last tokens, y: (B,) next tokens), as
      ``SparseBigram.sample`` returns them.
    """

    return jax.vmap(lambda X, k, y: prob.example_loss(theta, {"X": X, "k": k, "y": y}))(*data)


@eqx.filter_jit
def per_sample_gradients(prob: SparseBigram, theta: Theta, data: Batch, project: bool = False) -> Theta:
    """Preconditioned per-sample gradients {"V": (B, N, N), "A": (B, T, N)}: (g_V D_μ^{-1}, g_{a_k}/μ_k), with
    Π_T on the A-part if ``project`` (§5, §4). Unpreconditioned, g_V = −r (X a_k)ᵀ and g_{a_k} = −XᵀVᵀr with
    r = e_y − V X a_k (the other columns of A get 0).

    **Arguments:**

    - ``prob``: the ``SparseBigram`` instance.
    - ``theta``: the state {"V": N × N, "A": T × N}.
    - ``data``: B draws (X: (B, T) context tokens, k: (B,) last tokens, y: (B,) next tokens), as
      ``SparseBigram.sample`` returns them.
    - ``project``: apply Π_T (subtract the column mean) to the A-part, keeping A's columns summing to 1.
    """

    def one(X, k, y):
        r, h = draw_residual(prob, theta, X, k, y)
        gA = jnp.zeros_like(theta["A"]).at[:, k].set(-(theta["V"].T @ r)[X])
        return {"V": -jnp.outer(r, h), "A": gA}

    return prob.precondition(jax.vmap(one)(*data), project=project)


@eqx.filter_jit
def per_sample_sq_norms(
    prob: SparseBigram, theta: Theta, data: Batch, project: bool = False
) -> dict[str, Float[Array, " B"]]:
    """‖g_b‖² of every preconditioned per-sample gradient, keyed by θ's blocks b ("V", "A") as the gradients are,
    without forming them: g_V = −r hᵀD_μ^{-1} has norm ‖r‖·‖h/μ‖, and g_A is the single column −(Vᵀr)[X]/μ_k (minus
    its mean if ``project``)."""

    def one(X, k, y):
        r, h = draw_residual(prob, theta, X, k, y)
        col = -(theta["V"].T @ r)[X] / prob.mu[k]
        if project:
            col = col - jnp.mean(col)
        return (r @ r) * jnp.sum((h / prob.mu) ** 2), col @ col

    v, a = jax.vmap(one)(*data)
    return {"V": v, "A": a}


@eqx.filter_jit
def minibatch_gradient(prob: SparseBigram, theta: Theta, data: Batch, project: bool = False) -> Theta:
    """The minibatch average of ``per_sample_gradients``: an unbiased estimate of the preconditioned ∇L (§5), the
    stochastic gradient of Algorithm 1's stage 2.

    **Arguments:**

    - ``prob``: the ``SparseBigram`` instance.
    - ``theta``: the state {"V": N × N, "A": T × N}.
    - ``data``: B draws (X: (B, T) context tokens, k: (B,) last tokens, y: (B,) next tokens), as
      ``SparseBigram.sample`` returns them.
    - ``project``: apply Π_T (subtract the column mean) to the A-part, keeping A's columns summing to 1.
    """
    return jax.tree_util.tree_map(lambda g: jnp.mean(g, axis=0), per_sample_gradients(prob, theta, data, project))
