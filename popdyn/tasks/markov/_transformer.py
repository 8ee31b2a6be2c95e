"""The single-layer transformer of docs/models/markov.md §2.1 with its exact population loss (§3.3).

h_n = E[x_n] + p_n;  y_n = h_n + W_O Σ_{i≤n} att_{n,i} W_V h_i,  att ∝ exp(⟨W_Q h_n, W_K h_i⟩/√d) (causal);
z_n = y_n + W_2 ReLU(W_1 y_n);  logits_n = E z_n + b (tied) — with optional GPT-2 pre-LayerNorm.
For V = 2 the token embedding is the paper's x_n·e (token 0 embeds to 0) and the output is
σ(⟨e, z_n⟩ + b). The loss (1/N) Σ_n E[CE(x_{n+1}, logits_n)] is an exact sum over all V^N sequences.
"""

from __future__ import annotations

import math

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Int

from popdyn import _validate
from popdyn.exact import Chain, check_enumerable, expectation
from popdyn.exact._enumeration import MAX_SEQUENCES
from popdyn.exact._tables import WeightedTable
from popdyn.problem import Problem, Theta
from popdyn.tasks._leaves import leaf
from popdyn.tasks.markov._examples import sequence_table


def _layernorm(x, g, b, eps=1e-5):
    mu = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean((x - mu) ** 2, axis=-1, keepdims=True)
    return (x - mu) / jnp.sqrt(var + eps) * g + b


class Transformer(Problem):
    """One layer, one head, on sequences x_1..x_N of ``chain``; θ is a dict of arrays.

    Parameters: ``e`` (d,) for V = 2 or ``E`` (V, d); ``pos`` (N, d); ``W_Q, W_K, W_V, W_O`` (d, d);
    ``W_1`` (4d, d); ``W_2`` (d, 4d); ``b`` () for V = 2 or (V,); untied heads add ``a`` (d,) / ``U``
    (V, d); ``layernorm=True`` adds gains/biases ``ln1_g … lnf_b``. Default init: GPT-2, N(0, 0.02²),
    residual projections W_O, W_2 at 0.02/√2, biases 0 (§6.2). init_std is a 0-d array leaf, like the chain (a new
    value compiles nothing; problems of one shape stack and vmap); sizes and flags are static.

    **Arguments:**

    - ``chain``: the data, a ``popdyn.exact.Chain`` (V states, order k).
    - ``N``: the sequence length (≥ the chain's order; V^N sequences are enumerated per loss).
    - ``d``: the width.
    - ``tie``: tie the output head to the embedding; ``layernorm``: GPT-2 pre-LayerNorm.
    - ``init_std``: the std of ``init``'s weights (> 0).
    - ``chunk``: sequences per step of the enumeration; ``max_sequences``: the largest V^N allowed.
    """

    chain: Chain
    init_std: Float[Array, ""]
    N: int = eqx.field(static=True)
    d: int = eqx.field(static=True)
    tie: bool = eqx.field(static=True)
    layernorm: bool = eqx.field(static=True)
    chunk: int = eqx.field(static=True)
    max_sequences: int = eqx.field(static=True)

    def __init__(
        self,
        chain: Chain,
        N: int,
        d: int = 8,
        *,
        tie: bool = True,
        layernorm: bool = False,
        init_std: float = 0.02,
        chunk: int = 2048,
        max_sequences: int = MAX_SEQUENCES,
    ):
        if not isinstance(chain, Chain):
            raise ValueError(f"chain={chain!r} is invalid: must be a popdyn.exact.Chain")
        self.chain = chain
        self.N = _validate.int_at_least("N", N, max(1, chain.order))
        self.d = _validate.int_at_least("d", d, 1)
        self.tie, self.layernorm = bool(tie), bool(layernorm)
        self.init_std = leaf(_validate.positive("init_std", init_std))
        self.chunk = _validate.int_at_least("chunk", chunk, 1)
        self.max_sequences = _validate.int_at_least("max_sequences", max_sequences, 1)
        check_enumerable(chain.V, self.N, self.max_sequences)

    @property
    def n_sequences(self) -> int:
        """V^N: forward passes in one exact loss evaluation."""
        return self.chain.V**self.N

    def _shapes(self) -> dict[str, tuple[int, ...]]:
        V, N, d = self.chain.V, self.N, self.d
        binary = V == 2
        shapes: dict[str, tuple[int, ...]] = {
            "e" if binary else "E": (d,) if binary else (V, d),
            "pos": (N, d),
            "W_Q": (d, d),
            "W_K": (d, d),
            "W_V": (d, d),
            "W_O": (d, d),
            "W_1": (4 * d, d),
            "W_2": (d, 4 * d),
            "b": () if binary else (V,),
        }
        if not self.tie:
            shapes["a" if binary else "U"] = (d,) if binary else (V, d)
        if self.layernorm:
            for ln in ("ln1", "ln2", "lnf"):
                shapes[f"{ln}_g"], shapes[f"{ln}_b"] = (d,), (d,)
        return shapes

    def init(self, key: Array) -> Theta:
        """GPT-2 initialisation: N(0, std²) weights, std/√2 on W_O and W_2, zero biases, unit LN gains."""
        shapes = self._shapes()
        keys = dict(zip(shapes, jax.random.split(key, len(shapes)), strict=False))
        out = {}
        for name, shape in shapes.items():
            if name == "b" or name.endswith("_b"):
                out[name] = jnp.zeros(shape)
            elif name.endswith("_g"):
                out[name] = jnp.ones(shape)
            else:
                std = self.init_std / math.sqrt(2.0) if name in ("W_O", "W_2") else self.init_std
                out[name] = std * jax.random.normal(keys[name], shape)
        return out

    def _table(self, theta: Theta, head: bool) -> tuple[Array, Array]:
        """(V, d) embedding (or output head) table and (V,) output bias."""
        if self.chain.V == 2:
            vec = theta["e"] if (self.tie or not head) else theta["a"]
            return jnp.stack([jnp.zeros_like(vec), vec]), jnp.stack([jnp.zeros_like(theta["b"]), theta["b"]])
        return (theta["E"] if (self.tie or not head) else theta["U"]), theta["b"]

    def logits(self, theta: Theta, x: Int[Array, " N"]) -> Float[Array, "N V"]:
        """Next-token logits at positions 1..N of one sequence."""
        E, _ = self._table(theta, head=False)
        h = E[x] + theta["pos"]
        ln = (
            (lambda v, name: _layernorm(v, theta[f"{name}_g"], theta[f"{name}_b"]))
            if self.layernorm
            else (lambda v, name: v)
        )
        a_in = ln(h, "ln1")
        q, k, v = a_in @ theta["W_Q"].T, a_in @ theta["W_K"].T, a_in @ theta["W_V"].T
        scores = q @ k.T / math.sqrt(self.d)
        causal = jnp.tril(jnp.ones((x.shape[0], x.shape[0]), dtype=bool))
        att = jax.nn.softmax(jnp.where(causal, scores, -jnp.inf), axis=-1)
        y = h + (att @ v) @ theta["W_O"].T
        z = y + jax.nn.relu(ln(y, "ln2") @ theta["W_1"].T) @ theta["W_2"].T
        U, bias = self._table(theta, head=True)
        return ln(z, "lnf") @ U.T + bias

    def sequence_loss(self, theta: Theta, x: Int[Array, " N"], next_probs: Float[Array, "N V"]) -> Float[Array, ""]:
        """(1/N) Σ_n Σ_y P(x_{n+1} = y | x_1..x_n) · (−log softmax(logits_n)[y])."""
        return -jnp.mean(jnp.sum(next_probs * jax.nn.log_softmax(self.logits(theta, x)), axis=-1))

    def loss(self, theta: Theta) -> Float[Array, ""]:
        """Exact population next-token cross-entropy: Σ over all V^N sequences, chunked (§3.3)."""
        return expectation(
            lambda x, P: self.sequence_loss(theta, x, P), self.chain, self.N, self.chunk, self.max_sequences
        )

    def examples(self) -> WeightedTable:
        """One training sequence x_1..x_{N+1} of the chain with its N next tokens observed, as the authors' training
        samples them (§6): all V^{N+1} sequences with their probabilities; ValueError when V^{N+1} exceeds
        ``max_sequences`` (docs/models/markov.md, "Per-example data")."""
        return sequence_table(self.chain, self.N, self.max_sequences, type(self).__name__)

    def example_loss(self, theta: Theta, x: Int[Array, " N1"]) -> Float[Array, ""]:
        """ℓ(θ, x) = (1/N) Σ_n −log softmax(logits_n)[x_{n+1}]: ``sequence_loss`` of x_1..x_N with the observed next
        tokens (one-hot) in place of their laws, so that E_x ℓ(θ, x) = ``loss(θ)``.

        **Arguments:**

        - ``theta``: the weights (``init``'s keys).
        - ``x``: one point of ``examples()``, N + 1 tokens.
        """
        targets = jax.nn.one_hot(x[1:], self.chain.V, dtype=self.chain.kernel.dtype)
        return self.sequence_loss(theta, x[: self.N], targets)


def rank_one_weights(e, w, b, *, N: int, d: int, a=0.0, alpha=None) -> Theta:
    """Full-model weights of the canonical point (e, w, b) (and attention scalar a) by §2.2 / §2.4:
    e_vec = eα, p_n = −(e/2)α, W_Q = W_K = 0, W_V = a·ααᵀ, W_O = I, W_1 = (|w|/√d)·1αᵀ, W_2 = (w/√d)·α1ᵀ,
    tied head. For e > 0 the logit is e²(x − ½) + 2w|w|e²x + b at a = 0 (the canonical model exactly).

    **Arguments:**

    - ``e``, ``w``, ``b``: the canonical coordinates (embedding scale, MLP weight, bias).
    - ``N``, ``d``: the full model's sequence length and width (≥ 1).
    - ``a``: the attention scalar of §2.4 (0: no attention contribution).
    - ``alpha``: the direction α in ℝ^d, normalised to unit length (default 1/√d in every coordinate).

    Returns the weights as a θ dictionary of the ``Transformer`` without LayerNorm (float arrays).
    """
    N, d = _validate.int_at_least("N", N, 1), _validate.int_at_least("d", d, 1)
    alpha = jnp.full(d, 1.0 / math.sqrt(d)) if alpha is None else jnp.asarray(alpha) / jnp.linalg.norm(alpha)
    ones = jnp.ones(4 * d)
    zero = jnp.zeros((d, d))
    weights = {
        "e": e * alpha,
        "pos": jnp.broadcast_to(-(e / 2.0) * alpha, (N, d)),
        "W_Q": zero,
        "W_K": zero,
        "W_V": a * jnp.outer(alpha, alpha),
        "W_O": jnp.eye(d),
        "W_1": (jnp.abs(w) / math.sqrt(d)) * jnp.outer(ones, alpha),
        "W_2": (w / math.sqrt(d)) * jnp.outer(alpha, ones),
        "b": b,
    }
    # strongly typed float arrays, so a jitted loss never retraces on weak types
    return {k: jnp.asarray(v, dtype=jnp.result_type(float)) for k, v in weights.items()}
