"""SGD's linearised recursion δ ← (I − ηĤ_b)δ near a minimum, by enumerating every minibatch b: the maps of its
second and fourth moments, for tests that check popdyn's SGD threshold and SGD runs against them."""

from __future__ import annotations

import itertools
from math import comb

import numpy as np


def minibatches(n, B, replace, w):
    """Every minibatch (index tuples) with its probability: n^B ordered draws, or C(n, B) subsets."""
    if replace:
        draws = list(itertools.product(range(n), repeat=B))
        return draws, np.array([np.prod(w[list(b)]) for b in draws])
    subsets = list(itertools.combinations(range(n), B))
    return subsets, np.full(len(subsets), 1.0 / comb(n, B))


def second_moment_map(steps, probs, eta):
    """T_η as a d² × d² matrix: Σ_b P(b) (I − ηĤ_b) ⊗ (I − ηĤ_b), Ĥ_b one step's Hessian (steps (k, d, d))."""
    M = np.eye(steps.shape[1]) - eta * steps
    return np.einsum("k,kij,kab->iajb", probs, M, M).reshape(M.shape[1] ** 2, -1)


def fourth_moment_map(steps, probs, eta):
    """Σ_b P(b) (I − ηĤ_b)^{⊗4} as a d⁴ × d⁴ matrix: the map of E[δ^{⊗4}], which gives E‖δ‖⁴."""
    M = np.eye(steps.shape[1]) - eta * steps
    d = M.shape[1]
    return np.einsum("k,kij,kab,kpq,kuv->iapujbqv", probs, M, M, M, M).reshape(d**4, -1)


def enumerated(Hs, B, replace, w):
    """(the minibatch Hessians Ĥ_b, their probabilities) over every minibatch."""
    batches, probs = minibatches(len(Hs), B, replace, w)
    return np.stack([Hs[list(b)].mean(axis=0) for b in batches]), probs


def exact_moments(Hs, w, B, replace, eta, delta0, steps):
    """(E‖δ_t‖², E‖δ_t‖⁴) after ``steps`` steps of δ ← (I − ηĤ_b)δ from ``delta0``, Ĥ_b the mean of the examples'
    Hessians ``Hs`` (n, d, d) over a minibatch of B drawn with weights ``w`` (with or without replacement), by the
    enumerated maps of E[δδᵀ] and E[δ^{⊗4}]."""
    d = delta0.size
    steps_b, probs = enumerated(Hs, B, replace, w)
    T2, T4 = second_moment_map(steps_b, probs, eta), fourth_moment_map(steps_b, probs, eta)
    c2, c4 = np.einsum("i,j->ij", delta0, delta0).ravel(), np.einsum("i,j,k,l->ijkl", *[delta0] * 4).ravel()
    for _ in range(steps):
        c2, c4 = T2 @ c2, T4 @ c4
    eye = np.eye(d)
    return np.trace(c2.reshape(d, d)), np.einsum("ij,kl,ijkl->", eye, eye, c4.reshape((d,) * 4))
