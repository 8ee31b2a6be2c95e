"""Ground truth by brute force over all L^n sequences (docs/models/decision_lists.md §3 A; tiny cases only).

The model is evaluated literally, f(X) = σ(V X σ(XᵀWX)) with column softmaxes, on every sequence, and
the loss (1/n) Σ_j −log f(X)[y_j, j] is averaged under the sequence law. Used by the tests to check every
faster path; L^n is capped at ``MAX_BRUTE`` sequences.
"""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from popdyn.tasks.decision_list._data import ldt, validate_lists, validate_perm, validate_sizes

MAX_BRUTE = 100_000


def sequence_table(L: int, n: int, lists, perm, distribution: str = "distinct"):
    """(sequences (S, n), probabilities (S,), labels (S, n)) over every sequence of positive probability."""
    L, n, distribution = validate_sizes(L, n, distribution)
    lists, perm = validate_lists(lists, L), validate_perm(perm, L)
    if L**n > MAX_BRUTE:
        raise ValueError(f"L^n = {L}^{n} = {L**n} is too large for brute force: the limit is {MAX_BRUTE}")
    seqs = [s for s in itertools.product(range(L), repeat=n) if distribution == "iid" or len(set(s)) == n]
    probs = np.full(len(seqs), 1.0 / len(seqs))
    labels = [[perm[ldt(lists[a], set(s))] for a in s] for s in seqs]
    return jnp.asarray(seqs), jnp.asarray(probs), jnp.asarray(labels)


def brute_force_logits(W: Float[Array, "L L"], V: Float[Array, "L L"], seqs) -> Float[Array, "S L n"]:
    """V X σ(XᵀWX) for every sequence: the output logits, one column per position."""
    L = W.shape[0]

    def one(s):
        X = jax.nn.one_hot(s, L).T
        A = jax.nn.softmax(X.T @ W @ X, axis=0)
        return V @ X @ A

    return jax.vmap(one)(seqs)


def brute_force_loss(W, V, L: int, n: int, lists, perm, distribution: str = "distinct") -> Float[Array, ""]:
    """ℒ(W, V) = E_s[(1/n) Σ_j −log softmax(z_j)[y_j]] by enumerating every sequence (§3 A): the logits
    z = V X σ(XᵀWX) of the literal model, y_j = π(LDT) the label of position j. The ground truth the faster exact
    paths are tested against; tiny cases only.

    **Arguments:**

    - ``W``: the L × L attention matrix; ``V``: the L × L output matrix.
    - ``L``, ``n``: the number of tokens and the sequence length (L^n ≤ 100,000).
    - ``lists``, ``perm``: the decision lists and the label permutation (``validate_lists``, ``validate_perm``).
    - ``distribution``: the sequence law, one of ``DISTRIBUTIONS``.
    """
    seqs, probs, labels = sequence_table(L, n, lists, perm, distribution)
    z = brute_force_logits(W, V, seqs)
    logp = jax.nn.log_softmax(z, axis=1)
    per_pos = -jnp.take_along_axis(logp, labels[:, None, :], axis=1)[:, 0, :]
    return jnp.sum(probs * per_pos.mean(axis=1))


def brute_force_margin(W, V, L: int, n: int, lists, perm, distribution: str = "distinct") -> Float[Array, ""]:
    """min over sequences and positions of z_y − max_{k≠y} z_k, by enumerating every sequence (§3 A):
    perfect classification ⇔ margin > 0 (§4).

    **Arguments:**

    - ``W``: the L × L attention matrix; ``V``: the L × L output matrix.
    - ``L``, ``n``: the number of tokens and the sequence length (L^n ≤ 100,000).
    - ``lists``, ``perm``: the decision lists and the label permutation (``validate_lists``, ``validate_perm``).
    - ``distribution``: the sequence law, one of ``DISTRIBUTIONS``.
    """
    seqs, _, labels = sequence_table(L, n, lists, perm, distribution)
    z = brute_force_logits(W, V, seqs)
    zy = jnp.take_along_axis(z, labels[:, None, :], axis=1)[:, 0, :]
    others = jnp.where(jax.nn.one_hot(labels, L, axis=1) > 0, -jnp.inf, z)
    return jnp.min(zy - jnp.max(others, axis=1))
