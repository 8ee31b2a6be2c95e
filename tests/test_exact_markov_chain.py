"""Exact statistics of finite first-order Markov chains (docs/models/markov.md §1.1, §1.2, Appendix) and
the bracketed root finder ``popdyn.exact.bisect``.

Reference values come from three independent sources: the Appendix table of docs/models/markov.md (6 decimals), the
closed forms of §1.1/§1.2 evaluated here in numpy, and brute-force enumeration of sequences.
"""

from __future__ import annotations

import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from popdyn.exact import (
    binary_kernel,
    bisect,
    entropy_rate,
    stationary_distribution,
    unigram_loss,
    validate_transition_matrix,
)

TABLE_TOL = 1e-6  # the Appendix prints 6 decimals
EXACT_TOL = 1e-12

# Appendix: p, q, π1, H_rate, H_uni
APPENDIX = [
    (0.5, 0.8, 0.384615, 0.619015, 0.666278),
    (0.2, 0.3, 0.400000, 0.544587, 0.673012),
    (0.1, 0.1, 0.500000, 0.325083, 0.693147),
    (0.9, 0.9, 0.500000, 0.325083, 0.693147),
]


def h(t: float) -> float:
    """Binary entropy in nats, h(t) = −t ln t − (1−t) ln(1−t) (§1.1)."""
    return -t * math.log(t) - (1.0 - t) * math.log(1.0 - t)


def symmetric_kernel(V: int, p: float) -> np.ndarray:
    """§1.2: P_ii = 1−p, P_ij = p/(V−1) for i ≠ j."""
    P = np.full((V, V), p / (V - 1))
    np.fill_diagonal(P, 1.0 - p)
    return P


def block_entropy_rate(P: np.ndarray, n: int) -> tuple[float, float, float]:
    """(H(X_1..X_{n+1}) − H(X_1..X_n), H(X_1), marginal of X_{n+1}) by enumerating all V^(n+1)
    sequences from the stationary start. The stationary law is taken from a high matrix power, not
    from the library."""
    V = P.shape[0]
    pi = np.linalg.matrix_power(P, 4096)[0]
    seqs = np.array(list(itertools.product(range(V), repeat=n + 1)))
    prob = pi[seqs[:, 0]]
    for i in range(n):
        prob = prob * P[seqs[:, i], seqs[:, i + 1]]
    joint = prob.reshape((V,) * (n + 1))
    prefix = joint.sum(axis=-1)  # law of X_1..X_n

    def H(a):
        a = a[a > 0]
        return float(-(a * np.log(a)).sum())

    marg_first = joint.sum(axis=tuple(range(1, n + 1)))
    marg_last = joint.sum(axis=tuple(range(n)))
    return H(joint) - H(prefix), H(marg_first), marg_last


# ---------------------------------------------------------------- binary kernel and the Appendix


def test_binary_kernel_layout():
    P = binary_kernel(0.2, 0.3)
    assert P.dtype == np.float64
    assert P.shape == (2, 2)
    # p = P(next = 1 | current = 0), q = P(next = 0 | current = 1)
    np.testing.assert_array_equal(P, np.array([[0.8, 0.2], [0.3, 0.7]]))
    np.testing.assert_allclose(P.sum(axis=1), 1.0, rtol=0, atol=1e-15)


@pytest.mark.parametrize("p,q,pi1,H_rate,H_uni", APPENDIX)
def test_appendix_table(p, q, pi1, H_rate, H_uni):
    P = binary_kernel(p, q)
    pi = stationary_distribution(P)
    assert pi.shape == (2,)
    assert abs(pi[1] - pi1) < TABLE_TOL
    assert abs(entropy_rate(P) - H_rate) < TABLE_TOL
    assert abs(unigram_loss(P) - H_uni) < TABLE_TOL


@pytest.mark.parametrize("p,q,pi1,H_rate,H_uni", APPENDIX)
def test_appendix_closed_forms(p, q, pi1, H_rate, H_uni):
    """§1.1: π = (q/(p+q), p/(p+q)), H_rate = π0 h(p) + π1 h(q), H_uni = h(π1)."""
    P = binary_kernel(p, q)
    pi0_cf, pi1_cf = q / (p + q), p / (p + q)
    pi = stationary_distribution(P)
    assert abs(pi[0] - pi0_cf) < EXACT_TOL
    assert abs(pi[1] - pi1_cf) < EXACT_TOL
    assert abs(entropy_rate(P) - (pi0_cf * h(p) + pi1_cf * h(q))) < EXACT_TOL
    assert abs(unigram_loss(P) - h(pi1_cf)) < EXACT_TOL


def test_binary_closed_forms_random_kernels():
    rng = np.random.default_rng(11)
    for p, q in rng.uniform(0.01, 0.99, size=(25, 2)):
        P = binary_kernel(p, q)
        pi0, pi1 = q / (p + q), p / (p + q)
        pi = stationary_distribution(P)
        np.testing.assert_allclose(pi, [pi0, pi1], rtol=0, atol=EXACT_TOL)
        assert abs(entropy_rate(P) - (pi0 * h(p) + pi1 * h(q))) < EXACT_TOL
        assert abs(unigram_loss(P) - h(pi1)) < EXACT_TOL
        # the bigram predictor never does worse than the unigram one
        assert entropy_rate(P) <= unigram_loss(P) + 1e-15


def test_iid_chain_rate_equals_unigram():
    """p+q = 1: rows are equal, the chain is i.i.d. and H_rate = H_uni = h(p)."""
    P = binary_kernel(0.3, 0.7)
    assert abs(entropy_rate(P) - h(0.3)) < EXACT_TOL
    assert abs(unigram_loss(P) - h(0.3)) < EXACT_TOL


# ---------------------------------------------------------------- V-state chains (§1.2)


def test_symmetric_five_state_bigram_line():
    """V = 5, p = 0.1: H_rate = h(p) + p ln(V−1) = 0.463712 (the "Bigram loss 0.464" line)."""
    P = symmetric_kernel(5, 0.1)
    H = entropy_rate(P)
    assert abs(H - (h(0.1) + 0.1 * math.log(4))) < EXACT_TOL
    assert abs(H - 0.463712) < TABLE_TOL
    assert abs(unigram_loss(P) - math.log(5)) < EXACT_TOL
    np.testing.assert_allclose(stationary_distribution(P), np.full(5, 0.2), rtol=0, atol=EXACT_TOL)


@pytest.mark.parametrize("V", [3, 5, 7])
@pytest.mark.parametrize("p", [0.1, 0.3, 0.6, 0.9])
def test_symmetric_kernel_closed_forms(V, p):
    P = symmetric_kernel(V, p)
    assert abs(entropy_rate(P) - (h(p) + p * math.log(V - 1))) < EXACT_TOL
    assert abs(unigram_loss(P) - math.log(V)) < EXACT_TOL
    np.testing.assert_allclose(stationary_distribution(P), np.full(V, 1.0 / V), rtol=0, atol=EXACT_TOL)


@pytest.mark.parametrize("V,seed", [(3, 0), (3, 1), (4, 2), (4, 3)])
def test_general_chain_brute_force_block_entropy(V, seed):
    """For a stationary first-order chain H(X_1..X_{n+1}) − H(X_1..X_n) = H_rate exactly, and
    H(X_1) = H_uni; πP = π, and the stationary law is preserved along the enumerated sequences."""
    rng = np.random.default_rng(seed)
    P = rng.dirichlet(np.ones(V), size=V)
    pi = stationary_distribution(P)
    assert pi.shape == (V,)
    assert np.all(pi > 0)
    assert abs(pi.sum() - 1.0) < 1e-14
    np.testing.assert_allclose(pi @ P, pi, rtol=0, atol=1e-13)
    np.testing.assert_allclose(pi, np.linalg.matrix_power(P, 4096)[0], rtol=0, atol=EXACT_TOL)

    diff, H1, marg_last = block_entropy_rate(P, n=5)
    assert abs(entropy_rate(P) - diff) < EXACT_TOL
    assert abs(unigram_loss(P) - H1) < EXACT_TOL
    np.testing.assert_allclose(marg_last, pi, rtol=0, atol=EXACT_TOL)
    # and the §1.2 formulas, written out
    assert abs(entropy_rate(P) - float(-(pi[:, None] * P * np.log(P)).sum())) < EXACT_TOL
    assert abs(unigram_loss(P) - float(-(pi * np.log(pi)).sum())) < EXACT_TOL


def test_sparse_irreducible_chains():
    """Zero entries are allowed (0 ln 0 = 0): a deterministic 3-cycle has rate 0 and uniform π."""
    cycle = np.array([[0.0, 1.0, 0.0], [0.0, 0.0, 1.0], [1.0, 0.0, 0.0]])
    assert entropy_rate(cycle) == pytest.approx(0.0, abs=1e-15)
    assert abs(unigram_loss(cycle) - math.log(3)) < EXACT_TOL
    np.testing.assert_allclose(stationary_distribution(cycle), np.full(3, 1 / 3), rtol=0, atol=EXACT_TOL)
    # a sparse, aperiodic chain: brute force again
    P = np.array([[0.0, 0.5, 0.5, 0.0], [0.0, 0.2, 0.0, 0.8], [0.3, 0.0, 0.0, 0.7], [1.0, 0.0, 0.0, 0.0]])
    pi = stationary_distribution(P)
    np.testing.assert_allclose(pi @ P, pi, rtol=0, atol=1e-13)
    diff, H1, _ = block_entropy_rate(P, n=5)
    assert abs(entropy_rate(P) - diff) < EXACT_TOL
    assert abs(unigram_loss(P) - H1) < EXACT_TOL


# ---------------------------------------------------------------- validation


def test_validate_returns_float64_copy():
    P = validate_transition_matrix([[0, 1], [0.5, 0.5]])
    assert isinstance(P, np.ndarray) and P.dtype == np.float64
    np.testing.assert_array_equal(P, [[0.0, 1.0], [0.5, 0.5]])


@pytest.mark.parametrize(
    "P,match",
    [
        (np.full((2, 3), 1 / 3), r"shape \(2, 3\).*square"),
        (np.array([0.5, 0.5]), r"shape \(2,\).*square"),
        (np.ones((1, 1)), r"V >= 2"),
        (np.ones((2, 2, 2)) / 2, r"square"),
    ],
)
def test_validate_rejects_non_square(P, match):
    with pytest.raises(ValueError, match=match):
        validate_transition_matrix(P)


@pytest.mark.parametrize(
    "P,match",
    [
        ([[1.2, -0.2], [0.5, 0.5]], r"P\[0,0\]=(np\.float64\()?1\.2.*\[0, 1\]"),
        ([[0.5, 0.5], [-0.25, 1.25]], r"P\[1,0\]=(np\.float64\()?-0\.25.*out of range"),
        ([[0.5, 0.5], [np.nan, 0.5]], r"non-finite"),
        ([[0.5, 0.5], [np.inf, 0.5]], r"non-finite"),
    ],
)
def test_validate_rejects_entries_outside_unit_interval(P, match):
    with pytest.raises(ValueError, match=match):
        validate_transition_matrix(P)


@pytest.mark.parametrize(
    "P,match",
    [
        ([[0.5, 0.4], [0.5, 0.5]], r"row 0 of P sums to (np\.float64\()?0\.9.*sum to 1"),
        ([[0.5, 0.5], [0.5, 0.5 + 1e-6]], r"row 1 of P .*sum to 1"),
        (np.zeros((3, 3)), r"row 0 of P .*sum to 1"),
    ],
)
def test_validate_rejects_non_stochastic_rows(P, match):
    with pytest.raises(ValueError, match=match):
        validate_transition_matrix(P)


@pytest.mark.parametrize(
    "P",
    [
        np.eye(2),
        np.eye(3),
        np.array([[0.5, 0.5], [0.0, 1.0]]),  # absorbing state
        np.block([[binary_kernel(0.2, 0.3), np.zeros((2, 2))], [np.zeros((2, 2)), binary_kernel(0.4, 0.1)]]),
    ],
)
def test_validate_rejects_reducible(P):
    with pytest.raises(ValueError, match=r"reducible.*unreachable.*irreducible"):
        validate_transition_matrix(P)
    # every public statistic refuses it too (no silent "some" stationary law)
    for fn in (stationary_distribution, entropy_rate, unigram_loss):
        with pytest.raises(ValueError, match="reducible"):
            fn(P)


@pytest.mark.parametrize("V", [2, 3, 5, 8, 9, 300])
def test_irreducibility_needs_paths_of_every_length_up_to_V_minus_1(V):
    """The V-cycle is irreducible only through its path of V − 1 steps (1 → 2 → … → V−1 → 0); making V − 1
    absorbing cuts that path, so state 0 is unreachable from state 1."""
    cycle = np.roll(np.eye(V), 1, axis=1)  # i → i + 1 (mod V)
    np.testing.assert_array_equal(validate_transition_matrix(cycle), cycle)
    cut = cycle.copy()
    cut[V - 1] = np.eye(V)[V - 1]  # V − 1 now stays put
    with pytest.raises(ValueError, match=r"reducible \(state 0 is unreachable from state 1\)"):
        validate_transition_matrix(cut)


@pytest.mark.filterwarnings("error")
def test_dense_chains_with_hundreds_of_states_validate_without_overflow():
    """A dense V = 500 chain (the scb benchmark's size): (I + A)^(V-1) in floats would be 501^499 = inf and warn."""
    P = np.full((500, 500), 1 / 500)
    np.testing.assert_array_equal(validate_transition_matrix(P), P)
    np.testing.assert_allclose(stationary_distribution(P), np.full(500, 1 / 500), rtol=1e-12)


def test_validate_uses_given_name():
    with pytest.raises(ValueError, match=r"^K\[0,1\]"):
        validate_transition_matrix([[0.5, 1.5], [0.5, 0.5]], name="K")
    with pytest.raises(ValueError, match=r"row 1 of K"):
        validate_transition_matrix([[0.5, 0.5], [0.5, 0.6]], name="K")


def test_statistics_reject_invalid_input():
    for fn in (stationary_distribution, entropy_rate, unigram_loss):
        with pytest.raises(ValueError, match="square"):
            fn(np.full((2, 3), 1 / 3))
        with pytest.raises(ValueError, match="sum to 1"):
            fn([[0.5, 0.4], [0.5, 0.5]])


# ---------------------------------------------------------------- bisect


def test_bisect_known_roots():
    r = bisect(lambda x: x**3 - 2.0, jnp.asarray(0.0), jnp.asarray(2.0))
    assert abs(float(r) - 2.0 ** (1.0 / 3.0)) < 1e-14
    r = bisect(jnp.cos, jnp.asarray(0.0), jnp.asarray(3.0))
    assert abs(float(r) - math.pi / 2) < 1e-14
    # decreasing function
    r = bisect(lambda x: 1.0 - jnp.exp(x), jnp.asarray(-1.0), jnp.asarray(0.5))
    assert abs(float(r)) < 1e-14
    # root at an end point of the bracket
    r = bisect(lambda x: x - 1.0, jnp.asarray(1.0), jnp.asarray(3.0))
    assert abs(float(r) - 1.0) < 1e-14
    r = bisect(lambda x: x - 3.0, jnp.asarray(1.0), jnp.asarray(3.0))
    assert abs(float(r) - 3.0) < 1e-14


def test_bisect_reaches_adjacent_floats():
    """200 halvings reach rounding: the result brackets the root to a few ulps."""
    r = float(bisect(lambda x: x * x - 2.0, jnp.asarray(1.0), jnp.asarray(2.0)))
    assert abs(r - math.sqrt(2.0)) <= 4 * np.spacing(math.sqrt(2.0))


def test_bisect_nan_without_sign_change():
    r = bisect(lambda x: x**2 + 1.0, jnp.asarray(-1.0), jnp.asarray(1.0))
    assert np.isnan(float(r))
    r = bisect(lambda x: x - 5.0, jnp.asarray(0.0), jnp.asarray(1.0))
    assert np.isnan(float(r))


def test_bisect_under_vmap_and_jit():
    a = jnp.asarray(np.random.default_rng(0).uniform(0.1, 200.0, 64))
    lo, hi = jnp.zeros_like(a), jnp.full_like(a, 10.0)

    def root(a, lo, hi):
        return bisect(lambda x: x * x - a, lo, hi)

    r = jax.jit(jax.vmap(root))(a, lo, hi)
    assert r.shape == a.shape
    expected = np.sqrt(np.asarray(a))
    ok = expected <= 10.0
    assert ok.any() and (~ok).any()
    np.testing.assert_allclose(np.asarray(r)[ok], expected[ok], rtol=1e-14, atol=0)
    assert np.all(np.isnan(np.asarray(r)[~ok]))  # sqrt(a) > 10: no sign change on [0, 10]
