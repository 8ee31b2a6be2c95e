"""Ground truth by enumerating all N^(T+1) sequences (docs/models/scb.md §9; tiny N, T only).

x_1..x_T, x_{T+1} i.i.d. μ, k = x_{T+1}; the model f = V X a_k is evaluated literally and, for one-hot y
with E[y | x] = P X q_k (§1), E_y‖y − f‖² = 1 − 2 f·(P X q_k) + ‖f‖². The loss is half its average.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int

if TYPE_CHECKING:  # the model's per-example data use this module's enumeration
    from popdyn.tasks.scb._model import SparseBigram

MAX_SEQUENCES = 200_000
"""Largest N^(T+1) that ``sequence_table`` enumerates (tiny instances only: N = 3, T = 10 is 177,147)."""


def sequence_table(prob: SparseBigram) -> tuple[Int[Array, "S T1"], Float[Array, " S"]]:
    """(every sequence x_1..x_{T+1} as token ids, its probability Π_t μ_{x_t}); ValueError above
    ``MAX_SEQUENCES`` sequences. Traceable in ``prob`` (jit with ``eqx.filter_jit``).

    **Arguments:**

    - ``prob``: the ``SparseBigram`` instance; x_1..x_{T+1} are i.i.d. from its stationary law μ.
    """
    N, T = prob.N, prob.T
    if N ** (T + 1) > MAX_SEQUENCES:
        raise ValueError(
            f"N^(T+1) = {N}^{T + 1} = {N ** (T + 1)} sequences is too many for brute force: "
            f"the limit is {MAX_SEQUENCES}"
        )
    seqs = jnp.asarray(np.indices((N,) * (T + 1)).reshape(T + 1, -1).T)
    return seqs, jnp.prod(prob.mu[seqs], axis=1)


def brute_force_loss(prob: SparseBigram, V: Float[Array, "N N"], A: Float[Array, "T N"]) -> Float[Array, ""]:
    """L(V, A) = ½ Σ_x Pr(x) [1 − 2 (V X a_k)·(P X q_k) + ‖V X a_k‖²] over all N^(T+1) sequences (k = x_{T+1}):
    the literal model f = V X a_k, the ground truth the closed form of §3 is tested against.

    **Arguments:**

    - ``prob``: the ``SparseBigram`` instance (N^(T+1) ≤ ``MAX_SEQUENCES``).
    - ``V``: the N × N value matrix; ``A``: the T × N attention, column k the weights a_k over positions.
    """
    seqs, probs = sequence_table(prob)

    def one(x):
        X = jax.nn.one_hot(x[:-1], prob.N, dtype=V.dtype).T  # N x T
        k = x[-1]
        f = V @ X @ A[:, k]
        m = prob.P @ X @ prob.Qm[:, k]
        return 1.0 - 2.0 * f @ m + f @ f

    return 0.5 * probs @ jax.vmap(one)(seqs)
