"""Property tests of the Markov task's constructors: every invalid value raises a ValueError
naming its parameter before any JAX work; every valid value gives a finite loss and gradient, and a short GD run
reports every point as finite or with a non-OK status.

Valid-value examples reuse one compilation: the Transformer's chain and Canonical's (p, q) are array leaves (one
jitted loss serves all (p, q), per bias option for Canonical); AttentionScalar's arrays are swapped into one
template; the GD run uses one fixed problem.
"""

import math
import warnings

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _props import (
    WRONG_TYPE,
    bad_choice,
    bad_int,
    bad_open_unit,
    bad_positive,
    check_per_point,
    examples,
    raises_naming,
    tree_finite,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import popdyn
from popdyn.exact import Chain
from popdyn.tasks.markov import AttentionScalar, Canonical, Transformer, rank_one_weights

UNIT = st.floats(0.0, 1.0, exclude_min=True, exclude_max=True)
COORD = st.floats(-20.0, 20.0)
BINARY = {
    "Chain.binary": Chain.binary,
    "Canonical": Canonical,
    "AttentionScalar": lambda p, q: AttentionScalar(p, q, 2),
}


# ---- invalid values -------------------------------------------------------------------------------------
@pytest.mark.validation
@settings(max_examples=examples(60))
@given(ctor=st.sampled_from(sorted(BINARY)), which=st.sampled_from(["p", "q"]), bad=bad_open_unit(), good=UNIT)
def test_binary_chain_probabilities_outside_open_unit_interval_are_named(ctor, which, bad, good):
    """p or q outside (0, 1) (or NaN, inf, not a number) is refused by every binary-chain constructor, naming it."""
    p, q = (bad, good) if which == "p" else (good, bad)
    raises_naming(which, BINARY[ctor], p, q)


@settings(max_examples=examples(30))
@given(
    case=st.sampled_from(
        [
            ("Canonical", "bias"),
            ("Canonical", "init_std"),
            ("AttentionScalar", "bias"),
            ("AttentionScalar", "init_std"),
            ("AttentionScalar", "N"),
        ]
    ),
    data=st.data(),
)
def test_canonical_and_attention_scalar_options_are_validated(case, data):
    """bias must be 'profiled' or 'trained', init_std a finite positive number, N (AttentionScalar) an integer >= 1."""
    ctor, option = case
    kwargs = {"bias": "trained", "init_std": 0.01} | ({"N": 3} if ctor == "AttentionScalar" else {})
    bad = {"bias": bad_choice(("profiled", "trained")), "init_std": bad_positive(), "N": bad_int(1)}[option]
    kwargs[option] = data.draw(bad, label=option)
    raises_naming(option, Canonical if ctor == "Canonical" else AttentionScalar, 0.2, 0.3, **kwargs)


@settings(max_examples=examples(40))
@given(
    option=st.sampled_from(["chain", "N", "d", "init_std", "chunk", "max_sequences", "N_enumerable"]), data=st.data()
)
def test_transformer_options_are_validated(option, data):
    """Transformer: chain must be a Chain; N, d, chunk, max_sequences integers in range; init_std positive; V^N
    beyond max_sequences is refused naming N — all before any JAX work."""
    kwargs = {"chain": Chain.binary(0.2, 0.3), "N": 3, "d": 2, "init_std": 0.02, "chunk": 8, "max_sequences": 64}
    if option == "N_enumerable":
        option, kwargs["N"] = "N", data.draw(st.integers(7, 10_000), label="N")  # 2^N > 64
    elif option == "chain":
        kwargs["chain"] = data.draw(st.one_of(WRONG_TYPE, st.just(np.eye(2))), label="chain")
    else:
        minimum = {"N": 1, "d": 1, "chunk": 1, "max_sequences": 1}.get(option)
        kwargs[option] = data.draw(bad_positive() if option == "init_std" else bad_int(minimum), label=option)
    chain = kwargs.pop("chain")
    raises_naming(option, Transformer, chain, **kwargs)


def _non_stochastic(draw) -> np.ndarray:
    """A matrix that is no irreducible V x V transition matrix: wrong shape, an entry out of [0, 1] or not finite,
    a row not summing to 1, a reducible chain, or no numeric matrix at all."""
    kind = draw(st.sampled_from(["shape", "entry", "row", "reducible", "type"]))
    V = draw(st.integers(2, 4))
    if kind == "type":
        return draw(st.sampled_from([None, "abc", [["a", "b"], ["c", "d"]], [[0.5, 0.5], [1.0]]]))
    if kind == "shape":
        shape = draw(st.sampled_from([(V,), (V, V + 1), (1, 1), (V, V, 1), (0, 0)]))
        return draw(hnp.arrays(float, shape, elements=st.floats(0, 1)))
    P = np.full((V, V), 1.0 / V)
    i, j = draw(st.integers(0, V - 1)), draw(st.integers(0, V - 1))
    if kind == "entry":
        P[i, j] = draw(
            st.one_of(st.floats(max_value=-1e-9), st.floats(min_value=1.0 + 1e-9), st.just(math.nan), st.just(math.inf))
        )
    elif kind == "row":
        P[i] *= draw(st.one_of(st.floats(0, 0.999), st.floats(1.001, 10.0)))
    else:  # block-diagonal: states {0} and {1..V-1} never meet
        P = np.zeros((V, V))
        P[0, 0] = 1.0
        P[1:, 1:] = 1.0 / (V - 1)
    return P


@settings(max_examples=examples(30))
@given(data=st.data())
def test_non_stochastic_transition_matrices_are_named(data):
    """Chain.from_matrix refuses any P that is not a square, finite, row-stochastic, irreducible matrix, naming P."""
    raises_naming("P", Chain.from_matrix, data.draw(st.composite(lambda d: _non_stochastic(d))()))


@settings(max_examples=examples(25))
@given(
    probs=st.one_of(
        hnp.arrays(float, st.sampled_from([0, 1, 3, 5, 6, 7]), elements=st.floats(0, 1)),  # not 2^k, k >= 1
        hnp.arrays(
            float,
            st.sampled_from([2, 4]),
            elements=st.one_of(st.floats(max_value=-1e-9), st.floats(min_value=1 + 1e-9), st.just(math.nan)),
        ),
        st.sampled_from([None, "ab", ["a", "b"], [[0.5], [0.5, 0.5]]]),
    )
)
def test_order_k_probabilities_are_validated(probs):
    """Chain.binary_order_k needs 2^k probabilities in [0, 1] (k >= 1), naming probs otherwise."""
    raises_naming("probs", Chain.binary_order_k, probs)


@pytest.mark.validation
@settings(max_examples=examples(10))
@given(k=bad_int(1))
def test_order_k_random_chain_needs_k_at_least_one(k):
    """Chain.random_binary_order_k(k) refuses k < 1 and non-integers, naming k."""
    raises_naming("k", Chain.random_binary_order_k, k, jax.random.PRNGKey(0))


@settings(max_examples=examples(15))
@given(option=st.sampled_from(["N", "d"]), bad=bad_int(1))
def test_rank_one_weights_sizes_are_validated(option, bad):
    """rank_one_weights needs integers N, d >= 1 (the shapes of the full model's weights)."""
    kwargs = {"N": 3, "d": 2} | {option: bad}
    raises_naming(option, rank_one_weights, 1.0, 0.5, 0.0, **kwargs)


# ---- valid values ---------------------------------------------------------------------------------------
@settings(max_examples=examples(40))
@given(p=UNIT, q=UNIT, bias=st.sampled_from(["profiled", "trained"]), e=COORD, w=COORD, b=COORD)
def test_canonical_loss_and_gradient_are_finite(p, q, bias, e, w, b):
    """For every (p, q) in (0, 1)² and every point, the canonical loss and its gradient are finite."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # p + q = 1 warns by design
        prob = Canonical(p, q, bias=bias)
    theta = {"e": jnp.asarray(e), "w": jnp.asarray(w)} | ({"b": jnp.asarray(b)} if bias == "trained" else {})
    value, grad = _value_and_grad(prob, theta)
    assert tree_finite((value, grad)), (value, grad)


_value_and_grad = eqx.filter_jit(lambda prob, theta: jax.value_and_grad(prob.loss)(theta))


def random_point(prob, seed: int, scale: float) -> dict:
    """A point of ``prob``'s parameter space with N(0, scale²) entries (NumPy: no per-shape JAX compilation)."""
    rng = np.random.default_rng(seed)
    return {k: jnp.asarray(scale * rng.standard_normal(v.shape)) for k, v in prob.template().items()}


@settings(max_examples=examples(25))
@given(p=UNIT, q=UNIT, seed=st.integers(0, 2**32 - 1), scale=st.floats(0.0, 10.0))
def test_transformer_loss_and_gradient_are_finite(p, q, seed, scale):
    """The exact full-transformer loss (N = 2, d = 1) and its gradient are finite at random weights, any (p, q)."""
    prob = Transformer(Chain.binary(p, q), 2, 1)
    assert tree_finite(_value_and_grad(prob, random_point(prob, seed, scale)))


_AS_TEMPLATE = AttentionScalar(0.2, 0.3, 3)


@eqx.filter_jit
def _attention_scalar_value_and_grad(chain, occupancy, theta):
    prob = eqx.tree_at(lambda m: (m.chain, m.occupancy), _AS_TEMPLATE, (chain, occupancy))
    return jax.value_and_grad(prob.loss)(theta)


@settings(max_examples=examples(10))
@given(p=UNIT, q=UNIT, e=COORD, w=COORD, a=COORD, b=COORD)
def test_attention_scalar_loss_and_gradient_are_finite(p, q, e, w, a, b):
    """The (e, w, a) model's count-DP loss (N = 3) and gradient are finite for every (p, q) and point (its arrays
    are evaluated through one compiled template: p, q are static only for the entropy helpers)."""
    prob = AttentionScalar(p, q, 3)
    assert tree_finite((prob.chain, prob.occupancy))
    theta = {k: jnp.asarray(v) for k, v in dict(e=e, w=w, a=a, b=b).items()}
    assert tree_finite(_attention_scalar_value_and_grad(prob.chain, prob.occupancy, theta))


@settings(max_examples=examples(15))
@given(P=st.integers(2, 4).flatmap(lambda V: hnp.arrays(float, (V, V), elements=st.floats(0.01, 1.0))))
def test_valid_transition_matrices_build_a_stationary_chain(P):
    """Any positive matrix, row-normalised, is accepted; the chain starts from its (finite, stationary) law."""
    P = P / P.sum(axis=1, keepdims=True)
    chain = Chain.from_matrix(P)
    init = np.asarray(chain.init)
    assert tree_finite(chain) and np.isclose(init.sum(), 1.0) and np.allclose(init @ P, init, atol=1e-9)


_GD_PROBLEM = Canonical(0.2, 0.3)


@pytest.mark.slow
@settings(max_examples=examples(12))
@given(data=st.data())
def test_gradient_descent_reports_every_point(data):
    """A short GD run of the profiled canonical model from any batch of points and step sizes (up to 1e4) never
    raises: each point ends finite with an OK status, or is marked diverged / NaN."""
    prob = _GD_PROBLEM
    names = sorted(prob.template())
    pts = data.draw(hnp.arrays(float, (4, len(names)), elements=st.floats(-1e3, 1e3)), label="theta0")
    lr = data.draw(hnp.arrays(float, 4, elements=st.floats(1e-3, 1e4)), label="lr")
    traj = popdyn.gradient_descent(prob, {k: pts[:, i] for i, k in enumerate(names)}, lr=lr, steps=4, record_every=2)
    check_per_point(traj)
