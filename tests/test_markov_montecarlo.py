"""Monte-Carlo cross-checks of the exact Markov machinery (docs/models/markov.md §1.1–§1.2, §3.3).

The exact population loss of the transformer must agree with the plain Monte-Carlo estimator a researcher would use
(sample sequences, score the realised next tokens); the NumPy sampler must be exact in distribution; and the chain /
enumeration invariants (normalisation, stationarity, context indexing, chunk masking, validation) must hold.
"""

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from popdyn.exact import Chain, expectation
from popdyn.exact._chains import sample
from popdyn.exact._enumeration import sequences
from popdyn.tasks.markov import Transformer

P3 = [[0.5, 0.3, 0.2], [0.1, 0.6, 0.3], [0.3, 0.3, 0.4]]
ORDER2_PROBS = [0.1, 0.7, 0.4, 0.9]

CHAINS = {
    "binary": Chain.binary(0.2, 0.3),
    "3-state": Chain.from_matrix(P3),
    "order-2": Chain.binary_order_k(ORDER2_PROBS),
}
FIRST_ORDER = ["binary", "3-state"]
SEEDS = {"binary": 11, "3-state": 22, "order-2": 33}


def _stationary(P):
    """π by brute power iteration (independent of the library's least-squares solve)."""
    P = np.asarray(P, dtype=np.float64)
    return np.linalg.matrix_power(P, 4096)[0]


EXPECTED_PI = {"binary": np.array([0.3, 0.2]) / 0.5, "3-state": _stationary(P3)}


# ---------------------------------------------------------------------------------------------------------------------
# 1. Exact loss == Monte-Carlo estimate (issue acceptance)
# ---------------------------------------------------------------------------------------------------------------------

MC_N = 6
MC_M = 100_000


@functools.cache
def _mc_setup(name):
    """Model, weights, exact loss and the per-sequence losses of both estimators over MC_M sampled sequences."""
    chain = CHAINS[name]
    model = Transformer(chain, N=MC_N, d=4, init_std=0.5)
    theta = model.init(jax.random.PRNGKey(SEEDS[name]))
    X = jnp.asarray(sample(chain, MC_M, MC_N + 1, np.random.default_rng(SEEDS[name])))

    def realised(x):  # (1/N) Σ_n −log softmax(logits_n)[x_{n+1}]
        logp = jax.nn.log_softmax(model.logits(theta, x[:MC_N]), axis=-1)
        return -jnp.mean(logp[jnp.arange(MC_N), x[1:]])

    def conditional(x):  # E[CE | x_1..x_N]: the target's law instead of the realised token
        xs = x[:MC_N]
        return model.sequence_loss(theta, xs, chain.next_token_probs(xs))

    both = jax.jit(jax.vmap(lambda x: (realised(x), conditional(x))))
    real, cond = both(X)
    return float(model.loss(theta)), np.asarray(real), np.asarray(cond)


def _mean_se(v):
    return float(np.mean(v)), float(np.std(v, ddof=1) / np.sqrt(v.size))


@pytest.mark.parametrize("name", list(CHAINS))
def test_exact_loss_matches_realised_token_monte_carlo(name):
    exact, real, _ = _mc_setup(name)
    mean, se = _mean_se(real)
    assert np.all(np.isfinite(real))
    assert 0.0 < se < 5e-3, f"SE={se}: the test would have no power"
    assert abs(exact - mean) < 4 * se, f"exact={exact} MC={mean} ± {se}"


@pytest.mark.parametrize("name", list(CHAINS))
def test_exact_loss_matches_conditional_monte_carlo(name):
    exact, real, cond = _mc_setup(name)
    mean, se = _mean_se(cond)
    assert 0.0 < se < 5e-3
    # Rao–Blackwellised: conditioning on the prefix cannot increase the variance.
    assert np.var(cond) <= np.var(real)
    assert abs(exact - mean) < 4 * se, f"exact={exact} MC={mean} ± {se}"


# ---------------------------------------------------------------------------------------------------------------------
# 2. The sampler is exact in distribution
# ---------------------------------------------------------------------------------------------------------------------

SAMPLER_M = 200_000
SAMPLER_L = 4


@eqx.filter_jit
def _log_weights(chain, X):
    """log P(x) of every row x of X (one compiled program per chain and shape)."""
    return jax.vmap(chain.log_weight)(X)


def _exact_probs(chain, L):
    idx = jnp.arange(chain.V**L)
    X = sequences(chain.V, L, idx)
    return np.exp(np.asarray(_log_weights(chain, X)))


def _within(freq, prob, M):
    return np.abs(freq - prob) < 5 * np.sqrt(prob * (1 - prob) / M) + 1e-4


@pytest.mark.parametrize("name", list(CHAINS))
def test_sampler_matches_exact_law_of_length4_sequences(name):
    chain = CHAINS[name]
    X = sample(chain, SAMPLER_M, SAMPLER_L, np.random.default_rng(100 + SEEDS[name]))
    assert X.shape == (SAMPLER_M, SAMPLER_L)
    assert X.min() >= 0 and X.max() < chain.V
    code = (X * chain.V ** np.arange(SAMPLER_L - 1, -1, -1)).sum(axis=1)  # first token most significant
    freq = np.bincount(code, minlength=chain.V**SAMPLER_L) / SAMPLER_M
    prob = _exact_probs(chain, SAMPLER_L)
    assert abs(prob.sum() - 1.0) < 1e-13
    ok = _within(freq, prob, SAMPLER_M)
    assert ok.all(), f"cells {np.flatnonzero(~ok)}: freq {freq[~ok]} vs prob {prob[~ok]}"


@pytest.mark.parametrize("name", FIRST_ORDER)
def test_sampler_first_token_is_stationary(name):
    chain = CHAINS[name]
    X = sample(chain, SAMPLER_M, 2, np.random.default_rng(200 + SEEDS[name]))
    freq = np.bincount(X[:, 0], minlength=chain.V) / SAMPLER_M
    pi = EXPECTED_PI[name]
    assert _within(freq, pi, SAMPLER_M).all(), (freq, pi)


def test_sampler_order2_first_tokens_uniform_and_kernel_followed():
    chain = CHAINS["order-2"]
    X = sample(chain, SAMPLER_M, 3, np.random.default_rng(7))
    pair = 2 * X[:, 0] + X[:, 1]
    freq = np.bincount(pair, minlength=4) / SAMPLER_M
    assert _within(freq, np.full(4, 0.25), SAMPLER_M).all(), freq
    for c, p in enumerate(ORDER2_PROBS):  # context c = 2·x1 + x2 (oldest most significant)
        sel = pair == c
        m = sel.sum()
        f = X[sel, 2].mean()
        assert abs(f - p) < 5 * np.sqrt(p * (1 - p) / m) + 1e-4, (c, f, p)


# ---------------------------------------------------------------------------------------------------------------------
# 3. Chain invariants via exact enumeration
# ---------------------------------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("N", [3, 5])
@pytest.mark.parametrize("name", list(CHAINS))
def test_total_probability_and_rows_sum_to_one(name, N):
    chain = CHAINS[name]
    assert abs(float(expectation(lambda x, P: 1.0, chain, N)) - 1.0) < 1e-13
    assert abs(float(expectation(lambda x, P: jnp.sum(P), chain, N)) - N) < 1e-12
    # Rows are non-negative (a sum-to-1 check alone would not see a negative entry compensated elsewhere).
    assert float(expectation(lambda x, P: jnp.sum(jnp.minimum(P, 0.0)), chain, N)) == 0.0


@pytest.mark.slow
@pytest.mark.parametrize("N", [3, 5])
@pytest.mark.parametrize("name", FIRST_ORDER)
def test_first_order_marginals_are_stationary(name, N):
    """P(x_n = i) = π_i at every position, each from its own exact expectation (position and token are traced
    arguments of one compiled program, so the V·N expectations compile once)."""
    chain = CHAINS[name]
    pi = EXPECTED_PI[name]
    np.testing.assert_allclose(np.asarray(chain.init), pi, rtol=0, atol=1e-13)
    marginal = jax.jit(lambda n, i: expectation(lambda x, P: (x[n] == i) * 1.0, chain, N))
    for n in range(N):
        for i in range(chain.V):
            got = float(marginal(n, i))
            assert abs(got - pi[i]) < 1e-13, (n, i, got, pi[i])


def test_first_order_next_token_probs_are_kernel_rows():
    chain = CHAINS["3-state"]
    x = jnp.array([2, 0, 1, 1])
    np.testing.assert_allclose(np.asarray(chain.next_token_probs(x)), np.asarray(P3)[[2, 0, 1, 1]], atol=1e-15)


@pytest.mark.parametrize("N", [3, 5])
def test_order2_first_tokens_uniform(N):
    """P(x_1 = a, x_2 = b) = 1/4 for each pair, each from its own exact expectation (one compiled program, the pair
    traced)."""
    chain = CHAINS["order-2"]
    pair = jax.jit(lambda a, b: expectation(lambda x, P: ((x[0] == a) & (x[1] == b)) * 1.0, chain, N))
    for a in range(2):
        for b in range(2):
            got = float(pair(a, b))
            assert abs(got - 0.25) < 1e-13
    # Inside the first k tokens the next-token law is the initial law's conditional: uniform.
    row0 = float(expectation(lambda x, P: jnp.sum(jnp.abs(P[0] - 0.5)), chain, N))
    assert row0 < 1e-15


def test_order2_context_is_oldest_bit_most_significant():
    chain = CHAINS["order-2"]
    assert chain.order == 2 and chain.V == 2
    assert int(chain.context(jnp.array([1, 0]))) == 2
    assert int(chain.context(jnp.array([0, 1]))) == 1
    assert int(chain.context(jnp.array([1, 1]))) == 3
    assert int(chain.context(jnp.array([0, 1, 1, 0]))) == 2  # only the last k tokens count
    P = np.asarray(chain.next_token_probs(jnp.array([1, 0, 1])))
    np.testing.assert_allclose(P[0], [0.5, 0.5], atol=1e-15)
    np.testing.assert_allclose(P[1], [0.6, 0.4], atol=1e-15)  # P(x3=1 | x1=1, x2=0) = probs[0b10] = 0.4
    np.testing.assert_allclose(P[2], [0.3, 0.7], atol=1e-15)  # P(x4=1 | x2=0, x3=1) = probs[0b01] = 0.7
    # log_weight: 1/4 · P(x3=1 | 10) = 0.25 · 0.4
    assert abs(float(chain.log_weight(jnp.array([1, 0, 1]))) - np.log(0.1)) < 1e-14


def test_random_binary_order_k():
    key = jax.random.PRNGKey(5)
    c1, c2 = Chain.random_binary_order_k(3, key), Chain.random_binary_order_k(3, key)
    assert c1.order == 3 and c1.V == 2 and c1.kernel.shape == (8, 2)
    np.testing.assert_array_equal(np.asarray(c1.kernel), np.asarray(c2.kernel))
    k = np.asarray(c1.kernel)
    assert np.all((k > 0) & (k < 1)) and np.allclose(k.sum(axis=1), 1.0, atol=1e-15, rtol=0)
    assert len(set(k[:, 1].tolist())) == 8  # i.i.d. draws, not one repeated value
    c3 = Chain.random_binary_order_k(3, jax.random.PRNGKey(6))
    assert not np.allclose(np.asarray(c3.kernel), k)
    with pytest.raises(ValueError, match="k="):
        Chain.random_binary_order_k(0, key)


# ---------------------------------------------------------------------------------------------------------------------
# 4. Chunking and enumeration limits
# ---------------------------------------------------------------------------------------------------------------------


def _test_fn(x, P):
    """Non-trivial and non-zero on sequence 0 (so an unmasked padded slot would change the sum)."""
    w = jnp.arange(1, x.shape[0] + 1)
    return 1.0 + jnp.sum(w * x) + jnp.sum(P[:, -1] * w) ** 2


@pytest.mark.slow
@pytest.mark.parametrize("name", list(CHAINS))
def test_chunk_size_does_not_change_expectation(name):
    chain = CHAINS[name]
    N = 5
    total = chain.V**N
    vals = [float(expectation(_test_fn, chain, N, chunk=c)) for c in (1, 7, 64, total, 10 * total)]
    for v in vals[1:]:
        assert abs(v - vals[0]) < 1e-14 * max(1.0, abs(vals[0])), vals
    # Independent reference: explicit weighted sum over all sequences.
    X = sequences(chain.V, N, jnp.arange(total))
    w = np.exp(np.asarray(_log_weights(chain, X)))
    f = np.asarray(eqx.filter_jit(lambda ch, X: jax.vmap(lambda x: _test_fn(x, ch.next_token_probs(x)))(X))(chain, X))
    ref = float(np.sum(w * f))
    assert abs(vals[0] - ref) < 1e-12 * abs(ref)
    # Sanity of the mask check itself: an unmasked padding (3 extra copies of sequence 0 at chunk 7 on 32 / 243
    # sequences) would shift the sum by a visible amount.
    pad = (-total) % 7
    if pad:
        assert pad * w[0] * f[0] > 1e-6


def test_max_sequences_limit_names_N():
    chain = CHAINS["binary"]
    with pytest.raises(ValueError, match=r"N=5"):
        expectation(lambda x, P: 1.0, chain, 5, max_sequences=31)
    assert abs(float(expectation(lambda x, P: 1.0, chain, 5, max_sequences=32)) - 1.0) < 1e-13
    with pytest.raises(ValueError, match=r"N=4"):
        expectation(lambda x, P: 1.0, CHAINS["3-state"], 4, max_sequences=80)


def test_N_below_order_raises():
    with pytest.raises(ValueError, match=r"N=1"):
        expectation(lambda x, P: 1.0, CHAINS["order-2"], 1)
    assert abs(float(expectation(lambda x, P: 1.0, CHAINS["order-2"], 2)) - 1.0) < 1e-13


# ---------------------------------------------------------------------------------------------------------------------
# 5. Validation errors
# ---------------------------------------------------------------------------------------------------------------------


def test_chain_validation_errors():
    with pytest.raises(ValueError, match=r"row 1"):
        Chain.from_matrix([[0.5, 0.5], [0.3, 0.6]])
    with pytest.raises(ValueError, match=r"row 0"):
        Chain.from_matrix([[0.2, 0.3, 0.4], [0.1, 0.6, 0.3], [0.3, 0.3, 0.4]])
    with pytest.raises(ValueError, match=r"p=1\.2"):
        Chain.binary(1.2, 0.3)
    with pytest.raises(ValueError, match=r"q=0"):
        Chain.binary(0.2, 0.0)
    with pytest.raises(ValueError, match=r"probs\[1\]"):
        Chain.binary_order_k([0.1, 1.3])
    with pytest.raises(ValueError, match=r"probs\[2\]"):
        Chain.binary_order_k([0.1, 0.3, -0.1, 0.5])
    with pytest.raises(ValueError, match=r"probs"):
        Chain.binary_order_k([0.1, 0.2, 0.3])  # not a power of two


def test_transformer_validation_errors():
    chain = CHAINS["binary"]
    with pytest.raises(ValueError, match=r"N=-1"):
        Transformer(chain, N=-1)
    with pytest.raises(ValueError, match=r"d=0"):
        Transformer(chain, N=4, d=0)
    with pytest.raises(ValueError, match=r"chain="):
        Transformer("notachain", 4)
    with pytest.raises(ValueError, match=r"N=1"):
        Transformer(CHAINS["order-2"], N=1)  # shorter than the chain's order
    Transformer(CHAINS["order-2"], N=2, d=2)  # the boundary is accepted
