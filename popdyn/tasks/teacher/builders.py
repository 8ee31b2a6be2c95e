"""The paper's teachers as (S*, V*) builders (docs/models/teacher.md §1.1): CNN + average pooling, a GCN layer on a
cycle, sparse token selection and the group-sparse linear predictor; positions are 0-based.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from popdyn import _validate
from popdyn._batching import check_memory
from popdyn.tasks._keys import as_key
from popdyn.tasks.teacher._model import BilinearTeacher, validate_settings, validate_sizes

TEACHERS = ("cnn", "gcn", "sts", "gslp")
"""The paper's teachers (§1.1), the names ``make_teacher`` takes: CNN + average pooling, GCN on a cycle, sparse token
selection, group-sparse linear predictor."""


def cnn_pooling(D: int, K: int) -> np.ndarray:
    """S* = I_{D/K} ⊗ (1/K)1_K1_Kᵀ: non-overlapping pooling windows of K consecutive positions (§1.1a, square form
    [our choice]); K must divide D. Returns the D × D matrix S*, each column a distribution.

    **Arguments:**

    - ``D``: the number of tokens (positions); ``K``: the support of each column of S*.
    """
    D, K = validate_sizes(D, K)
    if D % K:
        raise ValueError(f"K={K} is invalid for cnn: must divide D={D} (non-overlapping pooling windows)")
    return np.kron(np.eye(D // K), np.full((K, K), 1.0 / K))


def cycle_gcn(D: int, K: int) -> np.ndarray:
    """S* = Ã/K for the (K−1)-regular circulant graph linking i to i±1, …, i±(K−1)/2 mod D, with self-loops
    (§1.1b; K = 3 is the cyclic tridiagonal cycle graph). K must be odd [our choice: a symmetric neighbourhood].
    Returns the D × D matrix S*, each column a distribution.

    **Arguments:**

    - ``D``: the number of tokens (positions); ``K``: the support of each column of S*.
    """
    D, K = validate_sizes(D, K)
    if K % 2 == 0:
        raise ValueError(f"K={K} is invalid for gcn: must be odd (i and its neighbours i±1, ..., i±(K-1)/2)")
    offset = (np.arange(D)[:, None] - np.arange(D)[None, :]) % D
    h = (K - 1) // 2
    return np.where((offset <= h) | (offset >= D - h), 1.0 / K, 0.0)


def token_selection(D: int, K: int, targets=None) -> np.ndarray:
    """S* = 1_g1_Dᵀ/K: every output averages the fixed target set g, |g| = K (§1.1c); default g = {0, …, K−1}
    [our choice; the paper's g is unknown]. Returns the D × D matrix S*.

    **Arguments:**

    - ``D``: the number of tokens (positions); ``K``: the support of each column of S*.
    - ``targets``: the K distinct positions of g in [0, D) (None: 0, …, K−1).
    """
    D, K = validate_sizes(D, K)
    g = np.arange(K) if targets is None else np.asarray(targets)
    if (
        g.shape != (K,)
        or not np.issubdtype(g.dtype, np.integer)
        or len(set(g.tolist())) != K
        or np.any(g < 0)
        or np.any(g >= D)
    ):
        raise ValueError(f"targets={targets!r} is invalid: must be K={K} distinct integer positions in [0, {D})")
    S = np.zeros((D, D))
    S[g, :] = 1.0 / K
    return S


def group_sparse(D: int, i_star: int = 0) -> np.ndarray:
    """S* = e_{i*}1_Dᵀ (K = 1): every output reads token i* (§1.1d); default i* = 0 [our choice]. Returns the D × D
    matrix S*.

    **Arguments:**

    - ``D``: the number of tokens (≥ 2).
    - ``i_star``: the position every output reads, in [0, D).
    """
    D = _validate.int_at_least("D", D, 2)
    if isinstance(i_star, bool) or not isinstance(i_star, (int, np.integer)) or not 0 <= i_star < D:
        raise ValueError(f"i_star={i_star!r} is out of range: must be an integer in [0, D) = [0, {D})")
    S = np.zeros((D, D))
    S[i_star, :] = 1.0
    return S


def random_V(key: Array | int, M: int, d: int, norm: float | None = None) -> Float[Array, "M d"]:
    """V* with iid N(0, 1) entries [our choice; the paper's V* is unknown], rescaled to ‖V*‖_F = ``norm`` if given;
    ``key`` a PRNG key or a seed (made a key once the sizes are checked: bad input compiles nothing).

    **Arguments:**

    - ``key``: a PRNG key, or an integer seed in [0, 2**32 − 1].
    - ``M``: the output channels (rows); ``d``: the features per token (columns).
    - ``norm``: the Frobenius norm ‖V*‖_F > 0 to rescale to (None: no rescaling).
    """
    M = _validate.int_at_least("M", M, 1)
    d = _validate.int_at_least("d", d, 1)
    norm = None if norm is None else _validate.positive("norm", norm)
    V = jax.random.normal(as_key(key), (M, d))
    return V if norm is None else V * (norm / jnp.linalg.norm(V))


def make_teacher(
    name: str,
    D: int,
    K: int | None = None,
    *,
    d: int,
    M: int | None = None,
    key: Array | int | None = None,
    v_norm: float | None = None,
    activation: str = "leaky",
    alpha: float | None = None,
    sigma_x: float = 1.0,
    sigma_eps: float = 0.0,
    zero_init: str = "limit",
) -> BilinearTeacher:
    """A ``BilinearTeacher`` for ``name`` ∈ {"cnn", "gcn", "sts", "gslp"} (§1.1).

    "cnn"/"gcn": S* from ``cnn_pooling``/``cycle_gcn`` and V* = ``random_V(key, M, d, v_norm)``. "sts": V* = I_d
    (M = d) and ``token_selection(D, K)``; ``key``, ``v_norm`` unused. "gslp": K = 1, M = 1, ``group_sparse(D)``,
    V* = ``random_V(key, 1, d, v_norm)``; an int ``key`` is a seed, made a PRNG key after every setting is checked.
    Remaining keywords go to ``BilinearTeacher``.

    **Arguments:**

    - ``name``: one of ``TEACHERS``.
    - ``D``: the number of tokens; ``K``: the support of each column of S* (forced to 1 for "gslp").
    - ``d``: features per token; ``M``: output channels ("cnn", "gcn"; forced to d for "sts" and 1 for "gslp").
    - ``key``: a PRNG key or a seed for V* (required for every teacher but "sts"); ``v_norm``: ‖V*‖_F (None: as
      drawn).
    - ``activation``, ``alpha``, ``sigma_x``, ``sigma_eps``, ``zero_init``: as in ``BilinearTeacher``.
    """
    _validate.choice("name", name, TEACHERS)
    d = _validate.int_at_least("d", d, 1)
    D = _validate.int_at_least("D", D, 1)
    check_memory(8.0 * 16 * D * D, f"a teacher with D={D:,} tokens")  # S*, the attention and their working copies
    v_norm = None if v_norm is None else _validate.positive("v_norm", v_norm)
    validate_settings(activation, alpha, sigma_x, sigma_eps, zero_init)  # before V* is drawn
    V: np.ndarray | Array
    if name == "sts":
        if M not in (None, d):
            raise ValueError(f"M={M!r} is invalid for sts: V* = I_d forces M = d = {d}")
        K = validate_sizes(D, K)[1]
        S, V = token_selection(D, K), np.eye(d)
    else:
        if key is None:
            raise ValueError(f"key=None is invalid for name={name!r}: V* is random, a PRNG key is required")
        if name == "gslp":
            if K not in (None, 1) or M not in (None, 1):
                raise ValueError(f"K={K!r}, M={M!r} are invalid for gslp: it forces K = 1 and M = 1")
            S, V = group_sparse(D), random_V(key, 1, d, v_norm)
        else:
            if M is None:
                raise ValueError(f"M=None is invalid for name={name!r}: give the number of output channels M >= 1")
            K = validate_sizes(D, K)[1]
            S = cnn_pooling(D, K) if name == "cnn" else cycle_gcn(D, K)
            V = random_V(key, M, d, v_norm)
    return BilinearTeacher(S, V, activation, alpha, sigma_x=sigma_x, sigma_eps=sigma_eps, zero_init=zero_init)


PAPER_SIZES = {"cnn": (36, 4), "gcn": (20, 3), "sts": (20, 4), "gslp": (20, 1)}  # (D, K) of the synthetic runs
DEFAULT_d, DEFAULT_M = 4, 4  # [our choice]: the paper's d, M are unknown


def build(
    teacher: str,
    D: int | None = None,
    K: int | None = None,
    activation: str = "relu",
    alpha: float | None = None,
    d: int = DEFAULT_d,
    M: int | None = None,
    seed: int = 0,
) -> BilinearTeacher:
    """The named teacher at the paper's synthetic (D, K) unless given; V* ~ N(0, 1) entries from PRNGKey(seed)
    (cnn, gcn: M × d, default 4 × 4; gslp: 1 × d; sts: V* = I_d)."""
    _validate.choice("teacher", teacher, TEACHERS)
    D0, K0 = PAPER_SIZES[teacher]
    D = D0 if D is None else D
    K = (K0 if K is None else K) if teacher != "gslp" else K
    if M is None and teacher in ("cnn", "gcn"):
        M = DEFAULT_M
    return make_teacher(
        teacher,
        D,
        K,
        d=d,
        M=M,
        key=_validate.seed("seed", seed),  # made a PRNG key once the settings are checked: bad input compiles nothing
        activation=activation,
        alpha=alpha,
    )
