"""Property tests of the decision-list task's constructors and builders: every invalid value
raises a ValueError naming its parameter before any JAX work; every valid instance gives a finite loss and
gradient at random points. (A GD run of this loss compiles for 8-11 s, so the per-point status of GD runs is
checked on cheaper problems in test_properties_dynamics.py.)

DecisionList keeps its lists and permutation static, so the valid-value losses run through one compiled template
per token law (L = 4, n = 2) into which each instance's arrays (histogram table, padded lists, permutation) are
swapped; padding the lists with the always-absent token L, as DecisionList itself does, makes every instance's
padded lists one shape.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from _props import bad_choice, bad_int, bad_positive, bad_seed, examples, raises_naming, tree_finite
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from popdyn.tasks.decision_list import (
    DecisionList,
    ReducedDecisionList,
    delta_gamma,
    loss_weights,
    random_lists,
    random_perm,
    rule_probabilities,
    theorem1_c,
)

L, N = 4, 2  # the sizes of the valid-value suite (C(4, 2) = 6 subsets, C(5, 2) = 10 multisets)
LISTS, PERM = random_lists(L, 3, 0), random_perm(L, 0)


@st.composite
def valid_lists(draw, L: int = L):
    """One list per token a: distinct tokens of [L] ending in a, of any length 1..L."""
    out = []
    for a in range(L):
        others = draw(st.permutations([b for b in range(L) if b != a]))
        out.append((*others[: draw(st.integers(0, L - 1))], a))
    return tuple(out)


@st.composite
def invalid_lists(draw):
    """Lists that break one rule: wrong count, an empty list, a wrong last token, a repeat, a token out of [L], a
    non-integer token, or no sequence at all."""
    lists = [list(lst) for lst in draw(valid_lists())]
    a = draw(st.integers(0, L - 1))
    kind = draw(st.sampled_from(["count", "empty", "last", "repeat", "range", "type", "not-a-list"]))
    if kind == "count":
        return lists[: draw(st.integers(0, L - 1))] + ([] if draw(st.booleans()) else [[0]] * draw(st.integers(2, 3)))
    if kind == "empty":
        lists[a] = []
    elif kind == "last":
        lists[a] = lists[a] + [draw(st.integers(0, L - 1).filter(lambda b: b != a))]
    elif kind == "repeat":
        lists[a] = [a] + lists[a]
    elif kind == "range":
        lists[a] = [draw(st.one_of(st.integers(max_value=-1), st.integers(min_value=L)))] + lists[a]
    elif kind == "type":
        lists[a] = [draw(st.sampled_from([0.5, 1.5, "x", None, 2.0]))] + lists[a]
    else:
        return draw(st.sampled_from([None, 3, "abc", 1.5]))
    return lists


@st.composite
def invalid_perms(draw):
    """Sequences that are no permutation of 0..L-1: wrong length, repeats, out of range, non-integers."""
    perm = list(draw(st.permutations(range(L))))
    kind = draw(st.sampled_from(["length", "repeat", "range", "type", "not-a-sequence"]))
    if kind == "length":
        return perm[:-1] if draw(st.booleans()) else perm + [L]
    i, j = draw(st.integers(0, L - 1)), draw(st.integers(0, L - 1))
    if kind == "repeat":
        perm[i] = perm[(i + 1) % L]
    elif kind == "range":
        perm[i] = draw(st.one_of(st.integers(max_value=-1), st.integers(min_value=L)))
    elif kind == "type":
        perm[j] = draw(st.sampled_from([perm[j] + 0.5, "1", None]))
    else:
        return draw(st.sampled_from([None, 3, 1.5]))
    return perm


# ---- invalid values -------------------------------------------------------------------------------------
@settings(max_examples=examples(50))
@given(option=st.sampled_from(["L", "n", "distribution", "n>L", "c", "train", "init_eps", "chunk"]), data=st.data())
def test_decision_list_scalar_options_are_validated(option, data):
    """DecisionList: L >= 2, n >= 1 (<= L for distinct tokens), a known distribution, c > 0, train in {both, W},
    init_eps >= 0 and chunk >= 1, each named when wrong."""
    kwargs = dict(L=L, n=N, lists=LISTS, perm=PERM, distribution="distinct", c=1.0, train="both", init_eps=0.0, chunk=8)
    if option == "n>L":
        option, kwargs["n"] = "n", data.draw(st.integers(L + 1, 10**6), label="n")
    else:
        bad = {
            "L": bad_int(2),
            "n": bad_int(1),
            "distribution": bad_choice(("distinct", "iid")),
            "c": bad_positive(),
            "train": bad_choice(("both", "W")),
            "init_eps": bad_positive(allow_zero=True),
            "chunk": bad_int(1),
        }
        kwargs[option] = data.draw(bad[option], label=option)
    raises_naming(option, DecisionList, **kwargs)


@settings(max_examples=examples(40))
@given(lists=invalid_lists())
def test_invalid_lists_are_named(lists):
    """Lists that are not one list of distinct tokens per token, ending in it, are refused naming lists."""
    raises_naming("lists", DecisionList, L, N, lists, PERM)


@settings(max_examples=examples(30))
@given(perm=invalid_perms())
def test_invalid_permutations_are_named(perm):
    """A label map that is no permutation of the tokens is refused naming perm."""
    raises_naming("perm", DecisionList, L, N, LISTS, perm)


@settings(max_examples=examples(30))
@given(
    case=st.sampled_from(
        [
            ("random_lists", "L"),
            ("random_lists", "M"),
            ("random_lists", "M>L"),
            ("random_lists", "seed"),
            ("random_perm", "L"),
            ("random_perm", "seed"),
        ]
    ),
    data=st.data(),
)
def test_random_builders_validate_sizes_and_seed(case, data):
    """random_lists(L, M, seed) and random_perm(L, seed): L >= 2, 1 <= M <= L, seed a 32-bit unsigned integer."""
    builder, option = case
    kwargs = {"L": 5, "M": 3, "seed": 0}
    if option == "M>L":
        option, kwargs["M"] = "M", data.draw(st.integers(6, 10**6), label="M")
    else:
        kwargs[option] = data.draw({"L": bad_int(2), "M": bad_int(1), "seed": bad_seed()}[option], label=option)
    if builder == "random_perm":
        kwargs.pop("M")
    raises_naming(option, random_lists if builder == "random_lists" else random_perm, **kwargs)


@settings(max_examples=examples(30))
@given(
    fn=st.sampled_from(["rule_probabilities", "loss_weights", "delta_gamma", "theorem1_c"]),
    option=st.sampled_from(["L", "n", "m", "distribution"]),
    data=st.data(),
)
def test_theory_builders_validate_their_sizes(fn, option, data):
    """The rule probabilities, loss weights and Theorem 1 constants need L >= 2, 1 <= n, list length m (M) in 1..L
    and a known distribution."""
    f = {
        "rule_probabilities": rule_probabilities,
        "loss_weights": loss_weights,
        "delta_gamma": delta_gamma,
        "theorem1_c": theorem1_c,
    }[fn]
    args = {"L": 5, "n": 2, "m": 2, "distribution": "distinct"}
    bad = {
        "L": bad_int(2),
        "n": bad_int(1),
        "m": st.one_of(bad_int(1), st.integers(6, 100)),
        "distribution": bad_choice(("distinct", "iid")),
    }[option]
    args[option] = data.draw(bad, label=option)
    name = "M" if option == "m" and fn in ("delta_gamma", "theorem1_c") else option
    raises_naming(name, f, *args.values())


@settings(max_examples=examples(25))
@given(option=st.sampled_from(["lengths", "c", "L", "n", "distribution"]), data=st.data())
def test_reduced_decision_list_options_are_validated(option, data):
    """ReducedDecisionList: list lengths are integers in 1..L, c > 0, and the sizes and law are validated."""
    kwargs = dict(L=5, n=2, lengths=(1, 2), c=1.0, distribution="distinct")
    bad = {
        "lengths": st.one_of(
            st.lists(st.one_of(bad_int(1), st.integers(6, 100)), min_size=1, max_size=3),
            st.sampled_from([(), None, 3, "12"]),
        ),
        "c": bad_positive(),
        "L": bad_int(2),
        "n": bad_int(1),
        "distribution": bad_choice(("distinct", "iid")),
    }
    kwargs[option] = data.draw(bad[option], label=option)
    raises_naming(option, ReducedDecisionList, **kwargs)


# ---- valid values ---------------------------------------------------------------------------------------
def _template(distribution: str) -> DecisionList:
    full = tuple(tuple([b for b in range(L) if b != a] + [a]) for a in range(L))  # every list of length L
    return DecisionList(L, N, full, PERM, distribution=distribution, chunk=64)


_TEMPLATES = {d: _template(d) for d in ("distinct", "iid")}


@eqx.filter_jit
def _value_and_grad(template, table, list_pad, perm_arr, theta):
    prob = eqx.tree_at(lambda m: (m.table, m.list_pad, m.perm_arr), template, (table, list_pad, perm_arr))
    return jax.value_and_grad(prob.loss)(theta)


@settings(max_examples=examples(25))
@given(
    lists=valid_lists(),
    perm=st.permutations(range(L)),
    distribution=st.sampled_from(["distinct", "iid"]),
    c=st.floats(1e-3, 1e3),
    train=st.sampled_from(["both", "W"]),
    init_eps=st.floats(0.0, 10.0),
    W=hnp.arrays(float, (L, L), elements=st.floats(-50, 50)),
)
def test_decision_list_loss_and_gradient_are_finite(lists, perm, distribution, c, train, init_eps, W):
    """Every valid instance (any lists, permutation, law, c, train, init_eps) has a finite initialisation and a
    finite exact loss and gradient at random W (with its V: trained, or cP)."""
    prob = DecisionList(L, N, lists, perm, distribution=distribution, c=c, train=train, init_eps=init_eps, chunk=64)
    noise = init_eps * np.random.default_rng(0).uniform(-0.5, 0.5, (L, L))  # V₀ of ``init``, without its PRNG
    theta = {"W": jnp.asarray(W), "V": jnp.asarray(c * prob.P + (noise if train == "both" else 0.0))}
    pad = np.full((L, L), L, dtype=np.int32)
    pad[:, : prob.max_length] = np.asarray(prob.list_pad)
    out = _value_and_grad(_TEMPLATES[distribution], prob.table, jnp.asarray(pad), prob.perm_arr, theta)
    assert tree_finite(out), out


@settings(max_examples=examples(10))
@given(
    lengths=st.sets(st.integers(1, 4), min_size=1),
    c=st.floats(1e-3, 1e3),
    distribution=st.sampled_from(["distinct", "iid"]),
)
def test_reduced_decision_list_accepts_valid_lengths(lengths, c, distribution):
    """Any non-empty set of list lengths in 1..L is accepted, sorted, and its W₀ = 0 has one column per length."""
    prob = ReducedDecisionList(4, 2, lengths, c, distribution)
    assert prob.lengths == tuple(sorted(lengths))
    assert sorted(prob.template()) == sorted(f"m{m}" for m in lengths)
