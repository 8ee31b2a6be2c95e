"""The Y/Z model of Scan and Snap and its exact population loss (docs/models/scan_snap.md §1–§3).

Parameters θ = {"Y": M×M, "Z": M×M}. For a sequence of class n with query m = ψ(n), the attention over
the T−1 contextual positions is b_t ∝ exp(z_{m,x_t}) (the query does not attend to itself), the token
mixture a = Xᵀb is ℓ2-normalised, f = a/‖a‖, and the logits over all M output tokens are Yᵀf (row =
contextual token, column = output token). The loss is the cross-entropy −J.

* T → ∞ (``T=None``, §2): a → c_n = softmax over supp(n) of z_m + log P(·|n), so
  ℒ_∞ = Σ_n π_n [logsumexp(Yᵀf_n) − (Yᵀf_n)_n], f_n = c_n/‖c_n‖.
* Finite T (§1, [derived]): the loss depends on a sequence only through its counts N ~ Mult(T−1, P(·|n)),
  so ℒ_T = Σ_n π_n Σ_N Mult(N) ℓ(Y, a(N, z_m), n) with a ∝ N ⊙ e^{z_m}: one multiset table per class.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int

from popdyn import _validate
from popdyn.exact._histograms import MAX_HISTOGRAMS, Histograms, check_histograms
from popdyn.exact._tables import WeightedTable
from popdyn.problem import Problem, Theta
from popdyn.tasks.scan_snap._data import Classes


def _masked_softmax(
    logits: Float[Array, "... M"], logw: Float[Array, "... M"], mask: Float[Array, "... M"]
) -> Float[Array, "... M"]:
    """softmax(logits + logw) restricted to ``mask`` (double ``where``: no NaN gradient off the mask)."""
    s = jnp.where(mask, logits + jnp.where(mask, logw, 0.0), -jnp.inf)
    return jax.nn.softmax(s, axis=-1)


def _cross_entropy(f: Float[Array, "... M"], Y: Float[Array, "M M"], label: Int[Array, "..."]) -> Float[Array, "..."]:
    """logsumexp(Yᵀf) − (Yᵀf)_label for ℓ2-normalised mixtures f."""
    logits = f @ Y
    return jax.nn.logsumexp(logits, axis=-1) - jnp.take_along_axis(logits, label[..., None], axis=-1)[..., 0]


def _normalise(a: Float[Array, "... M"]) -> Float[Array, "... M"]:
    return a / jnp.linalg.norm(a, axis=-1, keepdims=True)


class ScanSnap(Problem):
    """Sequence classes + the Y/Z model; exact population cross-entropy at ``T`` (None: T → ∞, §2).

    ``T`` counts the contextual tokens plus the query, as in the paper (T−1 contextual tokens). Finite T
    enumerates C(s+T−2, T−1) count vectors per class of support size s, chunked; a support too large for
    ``limit`` raises a ValueError naming T.

    **Arguments:**

    - ``classes``: the sequence classes (``make_classes``, ``syn_small``, ``syn_medium``, ``dataset2``).
    - ``M``: the vocabulary size, checked against the classes' (None: the classes').
    - ``T``: the sequence length (≥ 2), or None for the T → ∞ limit.
    - ``chunk``: count vectors per step of the enumeration; ``limit``: the most count vectors per class.
    """

    probs: Float[Array, "K M"]
    query: Int[Array, " K"]
    label: Int[Array, " K"]
    weights: Float[Array, " K"]
    T: int | None = eqx.field(static=True)
    tables: tuple = ()
    supports: tuple = ()

    def __init__(
        self,
        classes: Classes,
        M: int | None = None,
        T: int | None = None,
        *,
        chunk: int = 4096,
        limit: int = MAX_HISTOGRAMS,
    ):
        if not isinstance(classes, Classes):
            raise ValueError(f"classes={classes!r} is invalid: must be a Classes (see scan_snap.make_classes)")
        if M is not None and _validate.int_at_least("M", M, 2) != classes.M:
            raise ValueError(f"M={M} is invalid: the classes use a vocabulary of {classes.M} tokens")
        self.T = None if T is None else _validate.int_at_least("T", T, 2)
        self.probs = jnp.asarray(classes.probs)
        self.query = jnp.asarray(classes.query)
        self.label = jnp.asarray(classes.label)
        self.weights = jnp.asarray(classes.weights)
        if self.T is None:
            self.tables, self.supports = (), ()
            return
        supports = [np.flatnonzero(p > 0) for p in classes.probs]
        for s in supports:
            try:
                check_histograms(len(s), self.T - 1, distinct=False, limit=limit)
            except ValueError as e:
                raise ValueError(
                    f"T={T} is too large for exact enumeration: a class has {len(s)} tokens in its "
                    f"support and {e}; use T=None (the T → ∞ loss)"
                ) from None
        self.tables = tuple(
            Histograms(len(s), self.T - 1, distinct=False, chunk=chunk, limit=limit, token_probs=p[s])
            for s, p in zip(supports, classes.probs, strict=False)
        )
        self.supports = tuple(jnp.asarray(s, dtype=jnp.int32) for s in supports)

    @property
    def M(self) -> int:
        return self.probs.shape[1]

    @property
    def K(self) -> int:
        return self.probs.shape[0]

    def init(self, key: Array | None) -> Theta:
        """Y(0) = Z(0) = 0, the theorems' and Fig. 4's initialisation (§3, §6)."""
        del key
        zeros = jnp.zeros((self.M, self.M), self.probs.dtype)
        return {"Y": zeros, "Z": zeros}

    def init_uniform(self, key: Array) -> Theta:
        """PyTorch's default ``nn.Linear`` initialisation U(−1/√M, 1/√M) of both M×M layers (Fig. 6, §6)."""
        kY, kZ = jax.random.split(key)
        bound = 1.0 / np.sqrt(self.M)
        shape = (self.M, self.M)
        return {
            "Y": jax.random.uniform(kY, shape, self.probs.dtype, -bound, bound),
            "Z": jax.random.uniform(kZ, shape, self.probs.dtype, -bound, bound),
        }

    def attention(self, theta: Theta) -> Float[Array, "K M"]:
        """c_n = softmax over supp(n) of z_{ψ(n)} + log P(·|n): the T → ∞ attention mixture (§1)."""
        mask = self.probs > 0
        return _masked_softmax(theta["Z"][self.query], jnp.log(jnp.where(mask, self.probs, 1.0)), mask)

    def features(self, theta: Theta) -> Float[Array, "K M"]:
        """f_n = c_n/‖c_n‖ (§2)."""
        return _normalise(self.attention(theta))

    def class_losses(self, theta: Theta) -> Float[Array, " K"]:
        """The per-class cross-entropy at this T (§2; finite T: the multinomial expectation of §1)."""
        if self.T is None:
            return _cross_entropy(self.features(theta), theta["Y"], self.label)
        return jnp.stack([self._finite_class_loss(theta, k) for k in range(self.K)])

    def _finite_class_loss(self, theta: Theta, k: int) -> Float[Array, ""]:
        supp, table = self.supports[k], self.tables[k]
        z = theta["Z"][self.query[k]]
        return table.expectation(lambda slots, logc: self._count_loss(theta, z, self.label[k], supp[slots], logc))

    def _count_loss(self, theta: Theta, z, label, ids, logc) -> Float[Array, ""]:
        """The loss of one sequence whose contextual tokens hold the distinct tokens ``ids`` with log-counts ``logc``
        (§1): a ∝ N ⊙ e^{z}, −log softmax(Yᵀa/‖a‖)_label.

        **Arguments:**

        - ``theta``: {"Y", "Z"}; ``z``: the query's row of Z; ``label``: the class's next token.
        - ``ids``, ``logc``: the distinct contextual tokens padded to T−1 slots, their log-counts (−inf on padding).
        """
        w = jax.nn.softmax(z[ids] + logc)  # padding slots have logc = −inf: weight 0
        a = jnp.zeros(self.M, w.dtype).at[ids].add(w)
        return _cross_entropy(_normalise(a), theta["Y"], label)

    def loss(self, theta: Theta) -> Float[Array, ""]:
        """ℒ = Σ_n π_n ℓ_n: the exact population cross-entropy (minus J of §2)."""
        return jnp.dot(self.weights, self.class_losses(theta))

    def examples(self) -> WeightedTable:
        """One training sequence: its class n ~ π and (finite T) its T−1 contextual tokens, by their counts (the
        loss depends on nothing else, §1): points {"cls", "ids", "logc"} (the class, the distinct tokens padded to
        T−1 slots and their log-counts, −inf on padding) with probabilities π_n Mult(N). For T → ∞ a sequence of
        class n has the loss ℓ_n exactly, and the points are the classes {"cls"} with probabilities π_n
        (docs/models/scan_snap.md, "Per-example data")."""
        if self.T is None:
            return WeightedTable({"cls": jnp.arange(self.K, dtype=jnp.int32)}, self.weights)
        cls, ids, logc, prob = [], [], [], []
        for k, (supp, table) in enumerate(zip(self.supports, self.tables, strict=True)):
            slots = table.tokens.reshape(-1, self.T - 1)[: table.size]
            cls.append(jnp.full(table.size, k, dtype=jnp.int32))
            ids.append(supp[slots])
            logc.append(table.logc.reshape(-1, self.T - 1)[: table.size])
            prob.append(self.weights[k] * table.prob.reshape(-1)[: table.size])
        points = {"cls": jnp.concatenate(cls), "ids": jnp.concatenate(ids), "logc": jnp.concatenate(logc)}
        return WeightedTable(points, jnp.concatenate(prob))

    def example_loss(self, theta: Theta, x) -> Float[Array, ""]:
        """ℓ(θ, x): the cross-entropy of one sequence of class x["cls"] (finite T: with the contextual counts of x;
        T → ∞: the class loss ℓ_n of §2), so that E_x ℓ(θ, x) = ``loss(θ)``.

        **Arguments:**

        - ``theta``: {"Y", "Z"}.
        - ``x``: one point of ``examples()``.
        """
        k = x["cls"]
        if self.T is None:
            return _cross_entropy(self.features(theta)[k], theta["Y"], self.label[k])
        return self._count_loss(theta, theta["Z"][self.query[k]], self.label[k], x["ids"], x["logc"])

    def sequence_loss(self, theta: Theta, k: Int[Array, ""], context: Int[Array, " T1"]) -> Float[Array, ""]:
        """The loss of one sequence of class k with contextual tokens ``context``, evaluated literally by
        positions: b ∝ exp(z_{m, x_t}) over t = 1..T−1, f = LN(Xᵀb), −log softmax(Yᵀf)_label (§2)."""
        b = jax.nn.softmax(theta["Z"][self.query[k], context])
        a = jax.nn.one_hot(context, self.M, dtype=b.dtype).T @ b
        return _cross_entropy(_normalise(a), theta["Y"], self.label[k])

    def sample(self, key: Array, batch: int) -> tuple[Int[Array, " B"], Int[Array, "B T1"]]:
        """``batch`` sequences of the generative model (§1): classes ~ π, contextual tokens i.i.d. P(·|n)."""
        if self.T is None:
            raise ValueError("T=None has no finite sequences to sample: construct ScanSnap with an integer T")
        batch = _validate.int_at_least("batch", batch, 1)
        kc, kx = jax.random.split(key)
        cls = jax.random.choice(kc, self.K, (batch,), p=self.weights)
        logp = jnp.log(self.probs[cls])
        context = jax.random.categorical(kx, logp[:, None, :], axis=-1, shape=(batch, self.T - 1))
        return cls, context

    def sampled_loss(self, theta: Theta, key: Array, batch: int) -> Float[Array, ""]:
        """The minibatch cross-entropy on ``batch`` sampled sequences (the authors' training loss, §7)."""
        cls, context = self.sample(key, batch)
        return jnp.mean(jax.vmap(lambda k, c: self.sequence_loss(theta, k, c))(cls, context))
