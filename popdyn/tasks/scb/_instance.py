"""SCB instances: validation of (P, Qm) and random draws (docs/models/scb.md §1, §9).

P is N×N column-stochastic, P[i, j] = Pr(next = i | source = j), with a unique stationary law μ > 0
(Pμ = μ, the Perron vector). Qm is T×N: column k is q_k ∈ Δ_T, the attention pattern of last token k.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from popdyn import _validate
from popdyn._batching import check_memory
from popdyn.exact._markov_chain import stationary_distribution
from popdyn.tasks._keys import as_key

_SUM_TOL = 1e-10  # the column-sum tolerance, as for the rows of a Markov kernel (popdyn.exact._markov_chain)


def _columns_are_distributions(name: str, M: np.ndarray, over: str) -> None:
    """Every entry finite and ≥ 0 and every column summing to 1 (a probability vector over ``over``)."""
    bad = np.argwhere(~np.isfinite(M))
    if bad.size:
        i, j = bad[0]
        raise ValueError(f"{name}[{i},{j}]={float(M[i, j])!r} is invalid: entries must be finite and lie in [0, 1]")
    bad = np.argwhere(M < 0.0)
    if bad.size:
        i, j = bad[0]
        raise ValueError(f"{name}[{i},{j}]={float(M[i, j])!r} is out of range: entries must lie in [0, 1]")
    sums = M.sum(axis=0)
    bad_cols = np.flatnonzero(np.abs(sums - 1.0) > _SUM_TOL)
    if bad_cols.size:
        j = bad_cols[0]
        raise ValueError(
            f"column {j} of {name} sums to {float(sums[j])!r}: every column must sum to 1 "
            f"(a probability vector over the {over})"
        )


def validate_instance(P, Qm) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(P, Qm, μ) as float64 after checking §1: P column-stochastic and irreducible, so that its
    stationary law μ (Pμ = μ, Σμ = 1) is unique and positive; Qm T×N with columns in Δ_T.

    Raises ValueError naming ``P`` or ``Qm``, the offending entry or column and the allowed range.

    **Arguments:**

    - ``P``: the N × N transition matrix, P[i, j] = Pr(next = i | source = j) (columns sum to 1), N ≥ 2.
    - ``Qm``: the T × N attention targets, column k a distribution over the T positions.
    """
    P = _validate.float_array("P", P)
    if P.ndim != 2 or P.shape[0] != P.shape[1] or P.shape[0] < 2:
        raise ValueError(f"P has shape {P.shape}: must be a square N x N matrix with N >= 2")
    _columns_are_distributions("P", P, "N next tokens")
    try:
        mu = stationary_distribution(P.T)  # row-stochastic convention there: transpose
    except ValueError as e:
        raise ValueError(f"{e} (read column-wise); SCB needs a unique stationary law mu > 0") from None
    if mu.min() <= 0.0 or np.abs(P @ mu - mu).max() > _SUM_TOL:
        raise ValueError(f"P has stationary law mu={mu.tolist()}: every mu_j must be > 0 with P mu = mu")
    Qm = _validate.float_array("Qm", Qm)
    N = P.shape[0]
    if Qm.ndim != 2 or Qm.shape[1] != N or Qm.shape[0] < 1:
        raise ValueError(f"Qm has shape {Qm.shape}: must be T x N with T >= 1 and N = {N} columns (one per last token)")
    _columns_are_distributions("Qm", Qm, f"T = {Qm.shape[0]} positions")
    return P, Qm, mu


def random_instance(key: Array | int, N: int, T: int, Q: int) -> tuple[Float[Array, "N N"], Float[Array, "T N"]]:
    """(P, Qm): columns of P ~ Dirichlet(1_N); for each last token k a uniformly random support of Q of
    the T positions carrying Dirichlet(1_Q) weights (docs/models/scb.md §1 item 6). Use ``SparseBigram(P, Qm)``.

    **Arguments:** ``key`` a PRNG key or a seed (made a key once the sizes are checked: bad input compiles
    nothing); ``N``, ``T``, ``Q`` the vocabulary, the positions and the sparsity (1 ≤ Q ≤ T)."""
    N = _validate.int_at_least("N", N, 2)
    T = _validate.int_at_least("T", T, 1)
    Q = _validate.int_at_least("Q", Q, 1)
    if Q > T:
        raise ValueError(f"Q={Q} is out of range: the sparsity must satisfy 1 <= Q <= T = {T}")
    check_memory(8.0 * 16 * (N * N + T * N), f"an instance with N={N:,}, T={T:,}")  # P, Qm and their working copies
    return _draw(as_key(key), N, T, Q)


@functools.partial(jax.jit, static_argnums=(1, 2, 3))
def _draw(key: Array, N: int, T: int, Q: int) -> tuple[Float[Array, "N N"], Float[Array, "T N"]]:
    """Dirichlet(1_n) as normalised i.i.d. Exp(1) (exact for unit concentrations) and a uniform random Q-subset
    per column as the Q smallest of T uniforms, all from one uniform draw (cheap to compile)."""
    u = jax.random.uniform(key, (N * (N + T + Q),))
    e = -jnp.log1p(-u)  # Exp(1)
    eP, uS, eW = e[: N * N].reshape(N, N), u[N * N : N * (N + T)].reshape(N, T), e[N * (N + T) :].reshape(N, Q)
    P = (eP / eP.sum(axis=1, keepdims=True)).T
    support = jnp.argsort(uS, axis=1)[:, :Q]
    Qm = jnp.zeros((N, T)).at[jnp.arange(N)[:, None], support].set(eW / eW.sum(axis=1, keepdims=True)).T
    return P, Qm
