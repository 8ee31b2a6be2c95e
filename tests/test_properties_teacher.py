"""Property tests of the bilinear-teacher task's builders and constructors: every invalid value
raises a ValueError naming its parameter before any JAX work; every valid teacher gives a finite loss and gradient
at random (W, A). BilinearTeacher's S*, V*, α, σ_x, σ_ε are array leaves, so one compiled loss serves every teacher
of one shape and support size K (the zero-init convention, also static, takes three).
"""

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _props import (
    NON_FINITE,
    WRONG_TYPE,
    bad_choice,
    bad_int,
    bad_positive,
    examples,
    raises_naming,
    tree_finite,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from popdyn.tasks.teacher import (
    ACTIVATIONS,
    TEACHERS,
    ZERO_INITS,
    BilinearTeacher,
    TeacherReduced,
    cnn_pooling,
    cycle_gcn,
    group_sparse,
    make_teacher,
    random_V,
    token_selection,
)

D, K, M, d = 4, 2, 2, 2  # the shape of the valid-value suite
KEY = jax.random.PRNGKey(0)
S0, V0 = cnn_pooling(D, K), np.ones((M, d))


def bad_alpha() -> st.SearchStrategy:
    """Leaky slopes outside [0, 1), non-finite or not numbers (None is the default and valid)."""
    return st.one_of(
        st.floats(max_value=-1e-12), st.floats(min_value=1.0), NON_FINITE, WRONG_TYPE.filter(lambda v: v is not None)
    )


@st.composite
def bad_S(draw):
    """An S* that is no D x D matrix with exactly K entries 1/K per column, 1 <= K < D."""
    kind = draw(st.sampled_from(["shape", "entry", "counts", "full", "type"]))
    S = S0.copy()
    if kind == "shape":
        return draw(hnp.arrays(float, st.sampled_from([(D,), (D, D + 1), (1, 1), (D, D, 1)]), elements=st.floats(0, 1)))
    if kind == "type":
        return draw(st.sampled_from([None, "abc", [["a"] * D] * D]))
    i, j = draw(st.integers(0, D - 1)), draw(st.integers(0, D - 1))
    if kind == "entry":
        S[i, j] = draw(st.one_of(st.floats(max_value=-1e-9), NON_FINITE, st.floats(0.6, 10.0)))
    elif kind == "counts":
        S[:, j] = 0.0
        S[i, j] = 1.0  # one column with K = 1, the rest with K = 2
    else:
        S = np.full((D, D), 1.0 / D)  # K = D: no support to find
    return S


# ---- invalid values -------------------------------------------------------------------------------------
@settings(max_examples=examples(50))
@given(
    option=st.sampled_from(["S_star", "V_star", "activation", "alpha", "sigma_x", "sigma_eps", "zero_init"]),
    data=st.data(),
)
def test_bilinear_teacher_options_are_validated(option, data):
    """BilinearTeacher refuses a bad S* or V* (zero, non-finite, misshapen), an unknown activation or convention,
    a leaky slope outside [0, 1) and non-positive σ's, naming the argument."""
    kwargs = dict(S_star=S0, V_star=V0, activation="leaky", alpha=0.1, sigma_x=1.0, sigma_eps=0.0, zero_init="limit")
    bad = {
        "S_star": bad_S(),
        "V_star": st.one_of(
            hnp.arrays(float, st.sampled_from([(d,), (0, d), (M, d, 1)]), elements=st.floats(-1, 1)),
            st.just(np.zeros((M, d))),
            st.just(np.full((M, d), math.nan)),
            st.sampled_from([None, "abc", [[1, 2], [3]]]),
        ),
        "activation": bad_choice(ACTIVATIONS),
        "alpha": bad_alpha(),
        "sigma_x": bad_positive(),
        "sigma_eps": bad_positive(allow_zero=True),
        "zero_init": bad_choice(ZERO_INITS),
    }[option]
    kwargs[option] = data.draw(bad, label=option)
    raises_naming(option, BilinearTeacher, **kwargs)


@settings(max_examples=examples(15))
@given(activation=st.sampled_from(["linear", "relu"]), alpha=st.floats(0.0, 0.99))
def test_alpha_only_goes_with_leaky(activation, alpha):
    """Only the leaky activation takes a slope: alpha with linear or relu is refused, naming alpha."""
    raises_naming("alpha", BilinearTeacher, S0, V0, activation, alpha)


@settings(max_examples=examples(60))
@given(
    builder=st.sampled_from(["cnn_pooling", "cycle_gcn", "token_selection", "group_sparse", "random_V"]),
    option=st.sampled_from(["D", "K", "extra"]),
    data=st.data(),
)
def test_support_builders_validate_their_arguments(builder, option, data):
    """cnn_pooling (K | D), cycle_gcn (K odd), token_selection (K distinct targets in [0, D)), group_sparse
    (i_star in [0, D)) and random_V (M, d >= 1, norm > 0) refuse bad sizes, naming them."""
    D_, K_ = 12, 3
    if builder == "random_V":
        name = {"D": "M", "K": "d", "extra": "norm"}[option]
        args = {"M": 2, "d": 2, "norm": 1.0}
        args[name] = data.draw(bad_positive(optional=True) if name == "norm" else bad_int(1), label=name)
        raises_naming(name, random_V, KEY, **args)
        return
    if builder == "group_sparse":
        name = "D" if option == "D" else "i_star"
        args = {"D": D_, "i_star": 0}
        args[name] = data.draw(
            bad_int(2) if name == "D" else st.one_of(st.integers(max_value=-1), st.integers(min_value=D_), WRONG_TYPE),
            label=name,
        )
        raises_naming(name, group_sparse, **args)
        return
    args = {"D": D_, "K": K_ if builder != "cnn_pooling" else 4}
    if option == "D":
        args["D"] = data.draw(bad_int(2), label="D")
        name = "D"
    elif option == "K" or builder == "cnn_pooling" or builder == "cycle_gcn":
        name = "K"
        structural = {
            "cnn_pooling": st.sampled_from([5, 7, 8, 9, 10, 11]),  # K < D but no divisor of 12
            "cycle_gcn": st.sampled_from([2, 4, 6, 8, 10]),  # even
            "token_selection": st.integers(D_, 10**6),
        }[builder]
        args["K"] = data.draw(
            st.one_of(st.integers(max_value=0), st.integers(min_value=D_), WRONG_TYPE, structural), label="K"
        )
    else:
        name = "targets"
        args["targets"] = data.draw(
            st.one_of(
                st.lists(st.integers(0, D_ - 1), min_size=K_, max_size=K_).filter(lambda t: len(set(t)) < K_),
                st.lists(st.integers(), min_size=K_, max_size=K_).filter(lambda t: min(t) < 0 or max(t) >= D_),
                st.lists(st.integers(0, D_ - 1), max_size=6, unique=True).filter(lambda t: len(t) != K_),
                st.sampled_from([[0.0, 1.0, 2.0], "abc", 3]),
            ),
            label="targets",
        )
    f = {"cnn_pooling": cnn_pooling, "cycle_gcn": cycle_gcn, "token_selection": token_selection}[builder]
    raises_naming(name, f, **args)


MAKE_TEACHER_BAD = {  # (teacher, argument) -> bad values; sts has V* = I (no key, v_norm or free M), gslp K = M = 1
    **{(t, "name"): bad_choice(TEACHERS) for t in TEACHERS},
    **{(t, "d"): bad_int(1) for t in TEACHERS},
    **{(t, "M"): bad_int(1) for t in ("cnn", "gcn")},
    ("sts", "M"): st.integers(3, 100),
    ("gslp", "M"): st.integers(2, 9),
    **{(t, "K"): st.one_of(st.integers(max_value=0), st.integers(min_value=12)) for t in ("cnn", "gcn", "sts")},
    ("gslp", "K"): st.integers(2, 11),
    **{(t, "key"): st.none() for t in ("cnn", "gcn", "gslp")},
    **{(t, "v_norm"): bad_positive(optional=True) for t in ("cnn", "gcn", "gslp")},
    **{(t, "alpha"): bad_alpha() for t in TEACHERS},
}


@settings(max_examples=examples(40))
@given(case=st.sampled_from(sorted(MAKE_TEACHER_BAD)), data=st.data())
def test_make_teacher_validates_its_arguments(case, data):
    """make_teacher refuses an unknown teacher, d < 1, an M or K the teacher cannot have, a missing key, a
    non-positive v_norm and a bad leaky slope, naming the argument, before V* is drawn."""
    name, option = case
    kwargs = {
        "name": name,
        "D": 12,
        "K": {"cnn": 4, "gcn": 3, "sts": 2, "gslp": None}[name],
        "d": 2,
        "M": {"cnn": 2, "gcn": 2, "sts": None, "gslp": None}[name],
        "key": KEY,
        "v_norm": None,
        "activation": "leaky",
        "alpha": 0.1,
    }
    kwargs[option] = data.draw(MAKE_TEACHER_BAD[case], label=option)
    raises_naming(option, lambda name, D, **kw: make_teacher(name, D, **kw), **kwargs)


@settings(max_examples=examples(40))
@given(option=st.sampled_from(["D", "K", "v", "alpha", "sigma_x", "sigma_eps", "M", "zero_init"]), data=st.data())
def test_teacher_reduced_options_are_validated(option, data):
    """TeacherReduced(D, K, v, alpha, …): D >= 2, 1 <= K < D, v > 0, alpha in [0, 1], σ_x > 0, σ_ε >= 0, M >= 1
    and a known zero-init convention, each named when wrong."""
    kwargs = dict(D=6, K=2, v=1.0, alpha=0.1, sigma_x=1.0, sigma_eps=0.0, M=1, zero_init="limit")
    bad = {
        "D": bad_int(2),
        "K": st.one_of(bad_int(1), st.integers(6, 100)),
        "v": bad_positive(),
        "alpha": st.one_of(st.floats(max_value=-1e-12), st.floats(min_value=1.0 + 1e-9), NON_FINITE, WRONG_TYPE),
        "sigma_x": bad_positive(),
        "sigma_eps": bad_positive(allow_zero=True),
        "M": bad_int(1),
        "zero_init": bad_choice(ZERO_INITS),
    }[option]
    kwargs[option] = data.draw(bad, label=option)
    raises_naming(option, TeacherReduced, **kwargs)


@settings(max_examples=examples(10))
@given(method=st.sampled_from(["sample", "sampled_loss"]), n=bad_int(1))
def test_sampling_sizes_are_validated(method, n):
    """sample(key, n) needs n >= 1 and sampled_loss(θ, key, n) n >= 2 draws, naming n."""
    prob = BilinearTeacher(S0, V0)
    if method == "sample":
        raises_naming("n", prob.sample, KEY, n)
    else:
        raises_naming("n", prob.sampled_loss, prob.init(None), KEY, 1 if isinstance(n, int) and n >= 0 else n)


# ---- valid values ---------------------------------------------------------------------------------------
_value_and_grad = eqx.filter_jit(lambda prob, theta: jax.value_and_grad(prob.loss)(theta))


@st.composite
def supports(draw):
    """A D x D S* with exactly K = 2 entries 1/2 in every column, at random rows."""
    S = np.zeros((D, D))
    for j in range(D):
        rows = draw(st.permutations(range(D)))[:K]
        S[list(rows), j] = 1.0 / K
    return S


@pytest.mark.slow
@settings(max_examples=examples(40))
@given(
    S=supports(),
    V=hnp.arrays(float, (M, d), elements=st.floats(-10, 10)).filter(lambda V: np.any(V)),
    activation=st.sampled_from(ACTIVATIONS),
    alpha=st.floats(0.0, 1.0, exclude_max=True),
    sigma_x=st.floats(1e-3, 1e3),
    sigma_eps=st.floats(0.0, 10.0),
    zero_init=st.sampled_from(ZERO_INITS),
    W=hnp.arrays(float, (M, d), elements=st.one_of(st.just(0.0), st.floats(-100, 100))),
    A=hnp.arrays(float, (D, D), elements=st.floats(-1e3, 1e3)),
)
def test_loss_and_gradient_are_finite_for_every_teacher(S, V, activation, alpha, sigma_x, sigma_eps, zero_init, W, A):
    """Every valid teacher (any K-sparse S*, nonzero V*, activation, slope, noise levels, zero-init convention)
    gives a finite exact loss and gradient at any (W, A), W = 0 included (where ‖w_m‖ is not differentiable)."""
    prob = BilinearTeacher(S, V, activation, alpha if activation == "leaky" else None, sigma_x, sigma_eps, zero_init)
    assert tree_finite(_value_and_grad(prob, {"W": jnp.asarray(W), "A": jnp.asarray(A)}))
