"""Property tests of the Scan-and-Snap task's builders: every invalid value raises a ValueError
naming its parameter before any JAX work; every valid class set gives a finite T → ∞ loss and gradient at random
(Y, Z). ScanSnap's class data are array leaves, so one compiled loss serves every class set of one shape.
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
    bad_int,
    bad_positive,
    examples,
    raises_naming,
    tree_finite,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from popdyn.tasks.scan_snap import (
    B_n,
    Gamma,
    ScanSnap,
    dataset2,
    gamma,
    h,
    make_classes,
    scan_time,
    syn_medium,
    transition_time,
)

K, M = 2, 4  # the shape of the valid-value suite
GOOD = dict(probs=np.array([[0.5, 0.5, 0.0, 0.0], [0.0, 0.5, 0.5, 0.0]]), query=[0, 1], label=[2, 3])


@st.composite
def class_sets(draw):
    """Valid (probs, query, label, weights) for K = 2 classes over M = 4 tokens: any supports, distinct labels."""
    probs = draw(hnp.arrays(float, (K, M), elements=st.one_of(st.just(0.0), st.floats(1e-3, 1.0))))
    probs[:, 0] = np.where(probs.sum(axis=1) == 0, 1.0, probs[:, 0])  # every row needs some mass
    probs = probs / probs.sum(axis=1, keepdims=True)
    query = draw(hnp.arrays(np.int64, K, elements=st.integers(0, M - 1)))
    label = np.array(draw(st.permutations(range(M)))[:K])
    weights = draw(hnp.arrays(float, K, elements=st.floats(0.0, 1.0)))
    weights = np.full(K, 1 / K) if weights.sum() == 0 else weights / weights.sum()
    return probs, query, label, weights


@st.composite
def bad_class_fields(draw):
    """(field named in the error, kwargs of make_classes) with exactly one field broken."""
    kwargs = {k: np.array(v) for k, v in GOOD.items()}
    field = draw(st.sampled_from(["probs", "query", "label", "weights", "M"]))
    if field == "probs":
        kwargs["probs"] = draw(
            st.one_of(
                hnp.arrays(float, st.sampled_from([(M,), (0, M), (K, 1), (K, M, 1)]), elements=st.floats(0, 1)),
                st.just(np.where(np.eye(K, M) > 0, -0.5, 0.75)),  # a negative entry
                st.builds(
                    lambda x: np.where(GOOD["probs"] > 0, x, 0.0),
                    st.one_of(st.floats(0, 0.49), st.floats(0.51, 10), NON_FINITE),
                ),  # rows off 1
                st.sampled_from([None, "abc", [["a", "b"], ["c", "d"]], 0.5]),
            )
        )
    elif field in ("query", "label"):
        kwargs[field] = draw(
            st.one_of(
                hnp.arrays(np.int64, st.sampled_from([(0,), (1,), (3,), (K, 1)]), elements=st.integers(0, M - 1)),
                st.lists(st.integers(), min_size=K, max_size=K).filter(lambda v: min(v) < 0 or max(v) >= M),
                st.lists(st.floats(0, M - 1), min_size=K, max_size=K),
                st.sampled_from([None, "ab", 1.5, [[0], [1, 2]]]),
            )
        )  # the last is ragged: no array at all
        if field == "label" and draw(st.booleans()):
            kwargs["label"] = [3, 3]  # not distinct
    elif field == "weights":
        kwargs["weights"] = draw(
            st.one_of(
                hnp.arrays(float, K, elements=st.floats(0, 1)).filter(lambda w: abs(w.sum() - 1) > 1e-6),
                st.just(np.array([1.5, -0.5])),
                st.just(np.array([math.nan, 1.0])),
                st.just(np.ones(K + 1) / (K + 1)),
                st.sampled_from(["ab", [[0.5, 0.5]]]),
            )
        )
    else:
        kwargs["M"] = draw(st.one_of(bad_int(2, optional=True), st.integers(2, 100).filter(lambda m: m != M)))
    return field, kwargs


# ---- invalid values -------------------------------------------------------------------------------------
@settings(max_examples=examples(60))
@given(case=bad_class_fields())
def test_make_classes_names_the_broken_field(case):
    """make_classes refuses non-stochastic or misshapen probs, tokens out of [M], not integers or ragged, repeated
    labels, weights that are no distribution and a wrong M, naming the field."""
    field, kwargs = case
    raises_naming(field, make_classes, **kwargs)


@settings(max_examples=examples(50))
@given(
    option=st.sampled_from(
        [
            "n_query",
            "n_next_per_query",
            "n_common",
            "n_common_per_query",
            "n_distinct",
            "common_weight",
            "distinct_range",
        ]
    ),
    data=st.data(),
)
def test_dataset2_options_are_validated(option, data):
    """dataset2: the counts are integers (>= 1, or >= 0 for common tokens), common_weight > 0 and distinct_range a
    finite increasing pair of positive weights, each named when wrong."""
    bad = {
        "n_query": bad_int(1),
        "n_next_per_query": bad_int(1),
        "n_common": bad_int(0),
        "n_common_per_query": bad_int(0),
        "n_distinct": bad_int(1),
        "common_weight": bad_positive(),
        "distinct_range": st.one_of(
            st.tuples(st.floats(allow_nan=True), st.floats(allow_nan=True)).filter(
                lambda r: not (0 < r[0] < r[1] < math.inf)
            ),
            st.sampled_from([None, 0.5, (0.1,), (0.1, 0.2, 0.3), ("a", "b")]),
        ),
    }[option]
    kwargs = {"n_query": 1, "n_next_per_query": 1, "n_common": 1, "n_distinct": 2}
    kwargs[option] = data.draw(bad, label=option)
    raises_naming(option, dataset2, **kwargs)


@settings(max_examples=examples(10))
@given(n_query=bad_int(1))
def test_syn_medium_needs_a_positive_query_count(n_query):
    """syn_medium(n_query) refuses n_query < 1 and non-integers, naming n_query."""
    raises_naming("n_query", syn_medium, n_query)


@pytest.mark.validation
@settings(max_examples=examples(40))
@given(option=st.sampled_from(["classes", "M", "T", "T_enumerable", "chunk", "batch"]), data=st.data())
def test_scan_snap_options_are_validated(option, data):
    """ScanSnap: classes must be a Classes, M match its vocabulary, T an integer >= 2 small enough to enumerate,
    chunk >= 1; sample() needs a batch >= 1 — each named when wrong."""
    classes = make_classes(**GOOD)
    if option == "classes":
        bad = data.draw(st.one_of(WRONG_TYPE, st.just(GOOD["probs"])), label="classes")
        raises_naming("classes", ScanSnap, bad)
    elif option == "M":
        bad = data.draw(st.one_of(bad_int(2, optional=True), st.integers(2, 99).filter(lambda m: m != M)), label="M")
        raises_naming("M", ScanSnap, classes, M=bad)
    elif option == "T":
        raises_naming("T", ScanSnap, classes, T=data.draw(bad_int(2, optional=True), label="T"))
    elif option == "T_enumerable":  # C(s + T - 2, T - 1) count vectors per class exceed a limit of 10
        raises_naming("T", ScanSnap, classes, T=data.draw(st.integers(11, 10**9), label="T"), limit=10)
    elif option == "chunk":
        raises_naming("chunk", ScanSnap, classes, T=3, chunk=data.draw(bad_int(1), label="chunk"))
    else:
        raises_naming("batch", ScanSnap(classes, T=3).sample, jax.random.PRNGKey(0), data.draw(bad_int(1), "batch"))


@settings(max_examples=examples(40))
@given(
    fn=st.sampled_from(["h", "gamma", "Gamma", "B_n", "transition_time", "scan_time"]),
    option=st.sampled_from(["t", "K", "M", "eta_y", "eta_z", "C0"]),
    data=st.data(),
)
def test_closed_forms_validate_scalar_arguments(fn, option, data):
    """The closed forms refuse t < 0, K < 1, M < 2, non-positive rates and C0, naming the argument."""
    params = {
        "h": ("t", "M", "eta_y"),
        "gamma": ("t", "K", "M", "eta_y"),
        "Gamma": ("t", "K", "M", "eta_y", "eta_z"),
        "B_n": ("t", "K", "M", "eta_y", "eta_z", "C0"),
        "transition_time": ("K", "M", "eta_y"),
        "scan_time": ("K", "M", "eta_y"),
    }[fn]
    if option not in params:
        option = params[-1]
    args = {"t": 1.0, "K": 2, "M": 5, "eta_y": 1.0, "eta_z": 1.0, "C0": 1.0}
    bad = {
        "t": st.one_of(st.floats(max_value=0.0, exclude_max=True), NON_FINITE),
        "K": st.integers(max_value=0),
        "M": st.integers(max_value=1),
    }.get(option, st.one_of(st.floats(max_value=0.0), NON_FINITE))
    args[option] = data.draw(bad, label=option)
    f = {
        "h": h,
        "gamma": gamma,
        "Gamma": Gamma,
        "B_n": B_n,
        "transition_time": transition_time,
        "scan_time": scan_time,
    }[fn]
    raises_naming(option, f, *(args[p] for p in params))


# ---- valid values ---------------------------------------------------------------------------------------
_value_and_grad = eqx.filter_jit(lambda prob, theta: jax.value_and_grad(prob.loss)(theta))


@settings(max_examples=examples(40))
@given(
    classes=class_sets(),
    Y=hnp.arrays(float, (M, M), elements=st.floats(-50, 50)),
    Z=hnp.arrays(float, (M, M), elements=st.floats(-50, 50)),
)
def test_loss_and_gradient_are_finite_for_every_class_set(classes, Y, Z):
    """Every valid class set (any supports, queries, distinct labels, class weights) gives a finite T → ∞ loss and
    gradient at any (Y, Z), including where the attention saturates."""
    prob = ScanSnap(make_classes(*classes))
    assert tree_finite(_value_and_grad(prob, {"Y": jnp.asarray(Y), "Z": jnp.asarray(Z)}))


@settings(max_examples=examples(15))
@given(
    n_query=st.integers(1, 3),
    per=st.integers(1, 3),
    n_common=st.integers(0, 3),
    n_common_per_query=st.integers(0, 2),
    n_distinct=st.integers(1, 4),
    common_weight=st.floats(1e-3, 1e3),
    lo=st.floats(1e-3, 1.0),
    width=st.floats(1e-3, 10.0),
)
def test_dataset2_builds_valid_classes(
    n_query, per, n_common, n_common_per_query, n_distinct, common_weight, lo, width
):
    """Every valid dataset2 layout builds stochastic classes with distinct labels and the documented vocabulary."""
    c = dataset2(
        n_query,
        per,
        n_common=n_common,
        n_common_per_query=n_common_per_query,
        n_distinct=n_distinct,
        common_weight=common_weight,
        distinct_range=(lo, lo + width),
    )
    K_ = n_query * per
    assert c.K == K_ and c.M == n_common + n_query * n_common_per_query + K_ * n_distinct + n_query + K_
    assert np.allclose(c.probs.sum(axis=1), 1.0) and len(set(c.label.tolist())) == K_
