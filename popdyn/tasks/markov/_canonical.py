"""Canonical (e, w) and (e, w, b) models of binary Markov data (docs/models/markov.md §2.2–§3.2).

Next-token logits depend on the current token only:
f1 = (1/2 + 2w|w|)e² + b,  f0 = b − e²/2,  gap A = f1 − f0 = c(w)e² with c(w) = 1 + 2w|w|,
and since x_n ~ π at every position the loss has no N dependence (§3.2):
L = −π1[(1−q) ln σ(f1) + q ln σ(−f1)] − π0[p ln σ(f0) + (1−p) ln σ(−f0)].
With ``bias="profiled"`` (the paper's L(e, w)) b is replaced by its closed-form optimum b*(e, w).
"""

from __future__ import annotations

import functools
import math
import warnings
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.custom_derivatives import SymbolicZero
from jaxtyping import Array, Bool, Float

from popdyn import _validate
from popdyn.exact import MAX_SEQUENCES, Chain, binary_kernel, bisect, entropy_rate, unigram_loss
from popdyn.exact._tables import WeightedTable
from popdyn.problem import Overlay, Problem, Theta
from popdyn.tasks._leaves import all_float, floats, leaf
from popdyn.tasks.markov._examples import transition_table

W_SADDLE = -1.0 / math.sqrt(2.0)
"""c(w) = 0 at w = −1/√2: the saddle (0, −1/√2) of §4.1."""

E_SADDLE = -(1.0 + math.log(2.0)) / 2.0
"""Energy of the saddle, E(0, −1/√2) = −(1 + ln 2)/2 (§4.2)."""

ATTRACTORS = ("global", "local", "saddle")
"""Label order used by ``predicted_basin`` and basin maps: Γ*, Γ_min (e = 0), the saddle."""


PQ_ONE_TOL = 1e-12
"""Within this of p + q = 1 the chain is i.i.d. to rounding: a warning, and no §4.4 closed forms."""


def c(w):
    """c(w) = 1 + 2w|w|, the gap multiplier (§2.2)."""
    return 1.0 + 2.0 * w * jnp.abs(w)


def s(w):
    """s(w) = w² + sign(w) ln|w|, so that the energy is E = e² − s(w) (§4.2)."""
    return w**2 + jnp.sign(w) * jnp.log(jnp.abs(w))


def _s_log(sign, z):
    """s(w) at w = sign·e^z from z = ln|w|: finite where w itself underflows (|w| < 1e-308 for z < −709)."""
    return jnp.exp(2.0 * z) + sign * z


def _c_log(sign, z):
    """c(w) at w = sign·e^z."""
    return 1.0 + 2.0 * sign * jnp.exp(2.0 * z)


# XLA on CPU reads subnormal floats as zero, so ln p and p/(p+q) of a subnormal p in (0, 1) would give −inf or
# 0/0; its integer mantissa (a bitcast, no float arithmetic) gives both exactly.
def _subnormal(x):
    """(is x subnormal or zero, its mantissa as a float) for x ≥ 0, by bit pattern."""
    x = jnp.asarray(x)
    fi = jnp.finfo(x.dtype)
    bits = jax.lax.bitcast_convert_type(jax.lax.stop_gradient(x), jnp.int64 if fi.bits == 64 else jnp.int32)
    return (bits >> fi.nmant) == 0, (bits & ((1 << fi.nmant) - 1)).astype(x.dtype)


def _log(x):
    """ln x for x > 0 (jnp), exact also for subnormal x: ln(mantissa) + (minexp − nmant) ln 2 there."""
    x = jnp.asarray(x)
    fi = jnp.finfo(x.dtype)
    sub, mant = _subnormal(x)
    tiny = jnp.log(jnp.where(sub, mant, 1.0)) + (int(fi.minexp) - int(fi.nmant)) * math.log(2.0)
    return jnp.where(sub, tiny, jnp.log(jnp.where(sub, 1.0, x)))


def _scaled(x):
    """x·2^k for 0 ≤ x < 1 (jnp), exact also for subnormal x; k = nmant + |minexp|/2 keeps sums, differences and
    ratios of scaled values normal. Not differentiated (its derivatives would overflow): for comparisons and for
    the subnormal cases only."""
    x = jax.lax.stop_gradient(jnp.asarray(x))
    fi = jnp.finfo(x.dtype)
    k = int(fi.nmant) - int(fi.minexp) // 2
    sub, mant = _subnormal(x)
    return jnp.where(sub, mant * 2.0 ** (k + int(fi.minexp) - int(fi.nmant)), x * 2.0**k)


def _order_and_log_gap(p, q):
    """(p > q, q > p, ln|p − q|) for p, q in (0, 1) (jnp; the log is 0 where p = q), exact also where p, q or
    p − q is subnormal (compared and subtracted after ``_scaled``; the direct ln|p − q| everywhere else)."""
    p, q = jnp.asarray(p), jnp.asarray(q)
    fi = jnp.finfo(p.dtype)
    k = int(fi.nmant) - int(fi.minexp) // 2
    p_s, q_s = _scaled(p), _scaled(q)
    d_s = p_s - q_s
    small = 2.0**k * float(fi.tiny)  # the smallest normal number, scaled
    normal = (p_s >= small) & (q_s >= small) & (jnp.abs(d_s) >= small)
    direct = jnp.log(jnp.where(normal, jnp.abs(p - q), 1.0))
    scaled = jnp.log(jnp.where(d_s == 0, 1.0, jnp.abs(d_s))) - k * math.log(2.0)
    return d_s > 0, d_s < 0, jnp.where(normal, direct, jnp.where(d_s == 0, 0.0, scaled))


def _pis(p, q) -> tuple[Array, Array]:
    """(π0, π1) = (q, p)/(p+q) (jnp), finite also for subnormal p, q (then from ``_scaled``, not differentiated)."""
    p, q = jnp.asarray(p), jnp.asarray(q)
    sub = _subnormal(p)[0] | _subnormal(q)[0]
    p_s, q_s = _scaled(p), _scaled(q)
    p, q = jnp.where(sub, 0.5, p), jnp.where(sub, 0.5, q)
    return jnp.where(sub, q_s / (p_s + q_s), q / (p + q)), jnp.where(sub, p_s / (p_s + q_s), p / (p + q))


class _Terms(NamedTuple):
    """The numbers of the (p, q) chain the loss uses, exact also for subnormal p, q."""

    p_big: Array  # p > q
    ld: Array  # ln|p − q|, −inf at p = q
    two_ld: Array  # 2 ln|p − q|
    log_4pq: Array  # ln 4pq without underflow of 4pq for tiny p, q
    log_2p: Array
    log_2q: Array
    pi0: Array
    pi1: Array
    one_minus_p: Array
    one_minus_q: Array


@jax.jit
def _chain_terms(p, q) -> _Terms:
    """``_Terms`` of the (p, q) chain, in one compiled call: an eager loss evaluation dispatches these scalar steps
    once instead of one by one, and under jit it is inlined."""
    p_big, q_big, log_gap = _order_and_log_gap(p, q)
    ld = jnp.where(p_big | q_big, log_gap, -jnp.inf)
    log_p, log_q = _log(p), _log(q)
    return _Terms(
        p_big,
        ld,
        2.0 * ld,
        math.log(4.0) + log_p + log_q,
        math.log(2.0) + log_p,
        math.log(2.0) + log_q,
        *_pis(p, q),
        1.0 - p,
        1.0 - q,
    )


def _h(t):
    """Binary entropy h(t) in nats (jnp)."""
    return -t * _log(t) - (1.0 - t) * jnp.log1p(-t)


def binary_entropy_rate(p, q):
    """H_rate = π0 h(p) + π1 h(q) of the (p, q) chain: a float for floats (``popdyn.exact``), else jnp."""
    p, q = floats(p, q)
    if all_float((p, q)):
        return entropy_rate(binary_kernel(p, q))
    pi0, pi1 = _pis(p, q)
    return pi0 * _h(p) + pi1 * _h(q)


def binary_unigram_loss(p, q):
    """H_uni = h(π1) of the (p, q) chain: a float for floats (``popdyn.exact``), else jnp."""
    p, q = floats(p, q)
    if all_float((p, q)):
        return unigram_loss(binary_kernel(p, q))
    return _h(_pis(p, q)[1])


@jax.custom_jvp
def _profile_loss(prob: Canonical, A):
    return prob._cross_entropy(*prob.profiled_logits(A))


@functools.partial(_profile_loss.defjvp, symbolic_zeros=True)
def _profile_loss_jvp(primals, tangents):
    """Envelope theorem: at b* the derivative is the partial one at fixed logits (f0*, f1*), in A (``profile_slope``)
    and in the data (p, q); the data part is skipped when the data do not move (the usual case: ∇ in θ only)."""
    prob, A = primals
    dprob, dA = tangents
    f0, f1 = prob.profiled_logits(A)
    value = prob._cross_entropy(f0, f1)
    out = jnp.zeros_like(value)
    if not isinstance(dA, SymbolicZero):
        out = out + prob._slope(f1) * dA
    if not all(isinstance(t, SymbolicZero) for t in jax.tree_util.tree_leaves(dprob)):
        dprob = jax.tree_util.tree_map(
            lambda t: jnp.zeros(t.shape, t.dtype) if isinstance(t, SymbolicZero) else t, dprob
        )
        out = out + jax.jvp(lambda pr: pr._cross_entropy(f0, f1), (prob,), (dprob,))[1]
    return value, out


@eqx.filter_jit
def _curves(prob: Canonical, w: Float[Array | np.ndarray, " n"]) -> tuple[Array, Array, Array]:
    """Γ*'s e, the separatrix's e and the local-minimum mask along ``w``: one small program for the figures and
    the separatrix search, compiled once for every (p, q) instead of op by op."""
    w = jnp.asarray(w)  # already traced here (a no-op): NumPy ``w`` from the callers becomes a JAX array
    return prob.global_minimum_e(w), prob.separatrix_e(w), prob.is_local_min_w(w)


class Canonical(Problem):
    """The paper's canonical model on binary first-order Markov data with kernel [[1−p, p], [q, 1−q]].

    θ = {"e", "w"} (``bias="profiled"``, b = b*(e, w) in closed form, §2.2) or {"e", "w", "b"}
    (``bias="trained"``, §2.3). p+q = 1 is allowed with a warning: A* = 0, the e-curvature on e = 0
    vanishes and Γ* merges with that line; the closed-form limits of §4.4 do not apply there.
    p, q and init_std are 0-d array leaves (a new value compiles nothing; problems stack and vmap); the closed
    forms for reports (``pi1``, ``entropy_rate()``, ``optimal_gap()``…) are Python floats outside transformations.
    The loss does not depend on the sequence length; the per-example data do (``examples()``: one training sequence
    of N predicted tokens).

    **Arguments:**

    - ``p``: P(next = 1 | current = 0) ∈ (0, 1); ``q``: P(next = 0 | current = 1) ∈ (0, 1).
    - ``bias``: ``"profiled"`` (b = b*(e, w), §2.2) or ``"trained"`` (b a coordinate of θ, §2.3).
    - ``init_std``: the std of ``init``'s e and w (> 0).
    - ``N``: the number of predicted tokens of one training sequence x_1..x_{N+1}, for ``examples()`` (≥ 1;
      default 512, the authors', §6.3).
    """

    p: Float[Array, ""]
    q: Float[Array, ""]
    init_std: Float[Array, ""]
    bias: str = eqx.field(static=True)
    N: int = eqx.field(static=True)

    def __init__(self, p: float, q: float, bias: str = "profiled", init_std: float = 0.01, *, N: int = 512):
        p = _validate.open_unit("p", p)
        q = _validate.open_unit("q", q)
        self.bias = _validate.choice("bias", bias, ("profiled", "trained"))
        self.N = _validate.int_at_least("N", N, 1)
        init_std = _validate.positive("init_std", init_std)
        if abs(p + q - 1.0) < PQ_ONE_TOL:
            warnings.warn(
                f"p+q = {p + q:g}: the chain is i.i.d., A* = 0 and the landscape is flat to second "
                "order on e = 0, where Γ* merges with the unigram line (the theorems assume p+q != 1)",
                stacklevel=2,
            )
        self.p, self.q, self.init_std = leaf(p), leaf(q), leaf(init_std)

    # ---- data statistics (§1.1) -------------------------------------------------------------
    @property
    def pi1(self) -> float:
        """Stationary probability of state 1, π1 = p/(p+q)."""
        p, q = floats(self.p, self.q)
        return p / (p + q)

    @property
    def pi0(self) -> float:
        """Stationary probability of state 0, π0 = q/(p+q)."""
        p, q = floats(self.p, self.q)
        return q / (p + q)

    def entropy_rate(self) -> float:
        """H_rate = π0 h(p) + π1 h(q): the global-minimum (bigram) loss."""
        return binary_entropy_rate(self.p, self.q)

    def unigram_loss(self) -> float:
        """H_uni = h(π1): the loss on the line e = 0 (the bad local minimum)."""
        return binary_unigram_loss(self.p, self.q)

    def optimal_gap(self) -> float:
        """A* = ln[(1−p)(1−q)/(pq)], the log-odds gap of the bigram predictor."""
        p, q = floats(self.p, self.q)
        if all_float((p, q)):
            return math.log1p(-p) + math.log1p(-q) - math.log(p) - math.log(q)  # no underflow of pq for tiny p, q
        return jnp.log1p(-p) + jnp.log1p(-q) - _log(p) - _log(q)

    # ---- model --------------------------------------------------------------------------------
    def gap(self, theta: Theta) -> Float[Array, ""]:
        """A = c(w)e²."""
        return c(theta["w"]) * theta["e"] ** 2

    def profiled_logits(self, A: Float[Array, ""]) -> tuple[Float[Array, ""], Float[Array, ""]]:
        """(f0*, f1*) at gap A: f0* = ln u, u the positive root of qK u² + (q−p)u − p = 0, K = e^A, and
        f1* = f0* + A (§2.2). Evaluated in log space (logaddexp), each in the branch where it needs no
        cancellation against A, so both are accurate for every real A: with
        Z = ln(|p−q| + sqrt((p−q)² + 4pqK)), f1* = Z − ln 2q if p > q, else f0* = ln 2p − Z. Z is shared, and the
        branch is a jnp.where on p > q (traceable in p, q, so problems vmap; one Z per point either way)."""
        t = _chain_terms(self.p, self.q)
        Z = jnp.logaddexp(t.ld, 0.5 * jnp.logaddexp(t.two_ld, t.log_4pq + A))
        f1 = Z - t.log_2q
        f0 = t.log_2p - Z
        return jnp.where(t.p_big, f1 - A, f0), jnp.where(t.p_big, f1, f0 + A)

    def profiled_f0(self, A: Float[Array, ""]) -> Float[Array, ""]:
        """f0*(A), the optimal logit after a 0 at gap A (see ``profiled_logits``)."""
        return self.profiled_logits(A)[0]

    def optimal_bias(self, theta: Theta) -> Float[Array, ""]:
        """b*(e, w) = f0*(A) + e²/2."""
        return self.profiled_f0(self.gap(theta)) + theta["e"] ** 2 / 2.0

    def logits(self, theta: Theta) -> tuple[Float[Array, ""], Float[Array, ""]]:
        """(f0, f1) = (logit after a 0, logit after a 1)."""
        e, w = theta["e"], theta["w"]
        b = theta["b"] if self.bias == "trained" else self.optimal_bias(theta)
        return b - e**2 / 2.0, (0.5 + 2.0 * w * jnp.abs(w)) * e**2 + b

    def _cross_entropy(self, f0, f1):
        ls = jax.nn.log_sigmoid
        p, q, t = self.p, self.q, _chain_terms(self.p, self.q)
        return -t.pi1 * (t.one_minus_q * ls(f1) + q * ls(-f1)) - t.pi0 * (p * ls(f0) + t.one_minus_p * ls(-f0))

    def _slope(self, f1):
        t = _chain_terms(self.p, self.q)
        return t.pi1 * (jax.nn.sigmoid(f1) - t.one_minus_q)

    def loss(self, theta: Theta) -> Float[Array, ""]:
        """Exact population cross-entropy (§3.2); profiled over b when ``bias="profiled"``, i.e. ℓ(c(w)e²)."""
        if self.bias == "profiled":
            return self.profile_loss(self.gap(theta))
        return self._cross_entropy(*self.logits(theta))

    def examples(self) -> WeightedTable:
        """One training sequence x_1..x_{N+1} of the chain started from π, as the authors' SGD draws them (§6.3), by
        its transition counts {"counts": (n_00, n_01, n_10, n_11)}, on which its loss depends only: their exact law,
        O(N²) rows instead of 2^{N+1} sequences; ValueError when (N + 1)² > MAX_SEQUENCES (docs/models/markov.md,
        "Per-example data")."""
        p, q = self.p, self.q
        pi0, pi1 = _pis(p, q)
        kernel = jnp.stack([jnp.stack([1.0 - p, p]), jnp.stack([q, 1.0 - q])])
        return transition_table(Chain(jnp.stack([pi0, pi1]), kernel, 2, 1), self.N, MAX_SEQUENCES, type(self).__name__)

    def example_loss(self, theta: Theta, x) -> Float[Array, ""]:
        """ℓ(θ, x) = (1/N) Σ_ab n_ab CE(b, σ(f_a)): the mean next-token cross-entropy of one sequence with transition
        counts ``x["counts"]`` = (n_00, n_01, n_10, n_11), at the logits ``logits(θ)`` (b = b*(e, w) of the
        population when profiled), so that E_x ℓ(θ, x) = ``loss(θ)``.

        **Arguments:**

        - ``theta``: {"e", "w"} or {"e", "w", "b"}.
        - ``x``: one point of ``examples()``.
        """
        f0, f1 = self.logits(theta)
        n00, n01, n10, n11 = (x["counts"][i].astype(f0.dtype) for i in range(4))
        ls = jax.nn.log_sigmoid
        return -(n01 * ls(f0) + n00 * ls(-f0) + n11 * ls(f1) + n10 * ls(-f1)) / self.N

    def profile_loss(self, A: Float[Array, ""]) -> Float[Array, ""]:
        """ℓ(A) = min_b L at gap A: ℓ(0) = H_uni, ℓ(A*) = H_rate (§3.2).

        Differentiated through the closed form ℓ'(A) = π1(σ(f1*) − (1−q)) (envelope theorem), whose
        own derivative is taken by autodiff, so Hessians stay exact; this halves the cost of ∇L.
        """
        return _profile_loss(self, A)

    def profile_slope(self, A: Float[Array, ""]) -> Float[Array, ""]:
        """ℓ'(A) = π1(σ(f1*(A)) − (1−q)), f1* = f0*(A) + A (§3.2)."""
        return self._slope(self.profiled_logits(A)[1])

    def init(self, key: Array) -> Theta:
        """e, w ~ init_std·N(0, 1) and b = 0: the authors' Nov 2024 initialisation (§2.3), std 0.01."""
        ke, kw = jax.random.split(key)
        theta = {
            "e": self.init_std * jax.random.normal(ke, ()),
            "w": self.init_std * jax.random.normal(kw, ()),
        }
        if self.bias == "trained":
            theta["b"] = jnp.zeros(())
        return theta

    # ---- theory (§4) ------------------------------------------------------------------------
    def energy(self, theta: Theta) -> Float[Array, ""]:
        """E(e, w) = e² − w² − sign(w) ln|w|, conserved along profiled gradient flow (Lemma 1).

        Undefined (NaN) on the invariant line w = 0.
        """
        return theta["e"] ** 2 - s(theta["w"])

    def global_minimum_e(self, w: Float[Array, "..."]) -> Float[Array, "..."]:
        """The e ≥ 0 branch of Γ* = {c(w)e² = A*}; NaN where Γ* has no point at this w (§4.1)."""
        r = self.optimal_gap() / c(w)
        return jnp.where(r > 0, jnp.sqrt(jnp.where(r > 0, r, 1.0)), jnp.nan)

    def is_local_min_w(self, w: float | Float[Array, "..."]) -> Bool[Array, "..."]:
        """True where (0, w) is a local minimum: (p+q−1)·c(w) > 0 (§4.1)."""
        return (self.p + self.q - 1.0) * c(w) > 0

    def separatrix_e(self, w: Float[Array, "..."]) -> Float[Array, "..."]:
        """e ≥ 0 on the level set E = E_sad for w < 0: sqrt(w² − ln|w| − (1+ln 2)/2); NaN elsewhere."""
        r = jnp.where(w < 0, s(w) + E_SADDLE, -1.0)
        return jnp.where(r >= 0, jnp.sqrt(jnp.where(r >= 0, r, 0.0)), jnp.nan)

    def separatrix_distance(self, theta: Theta, within: float = 0.1, spacing: float = 1e-3) -> np.ndarray:
        """Euclidean distance from each (e, w) to the separatrix branch that flows into the saddle, to within
        ``spacing / 2``, and ``inf`` where it exceeds ``within``: the branch (both signs of e) up to
        |e| = max|e₀| + ``within`` is sampled every ``spacing`` of arc length and searched with a k-d tree
        bounded by ``within``, in time O((points + samples) log samples) (docs/basins.md, "Agreement with a
        closed form").
        NumPy in, NumPy out: for excluding boundary points of a map."""
        e0 = np.asarray(theta["e"], float)
        pts = np.stack([np.ravel(np.asarray(theta["w"], float)), e0.ravel()], 1)
        e_top = float(np.max(np.abs(e0), initial=0.0)) + within
        if self.separatrix_w_range()[1] < 0.0:  # w < −1/√2, where e ≥ |w| − 1: |w| ≤ e_top + 1 suffices
            w = np.linspace(-(e_top + 1.0), W_SADDLE, 20001)
        else:  # −1/√2 < w < 0, where e² ≈ −ln|w| as w → 0⁻: ln|w| evenly spread down to −(e_top² + 1)
            w = -np.exp(np.linspace(math.log(-W_SADDLE), -min(e_top**2 + 1.0, 700.0), 20001))
        e = np.nan_to_num(np.asarray(_curves(self, w)[1]))
        if w[-1] > W_SADDLE and e[-1] < e_top:  # beyond ln|w| = −700 the branch runs up the line w = 0⁻
            w, e = np.append(w, w[-1]), np.append(e, e_top)
        arc = np.concatenate([[0.0], np.cumsum(np.hypot(np.diff(w), np.diff(e)))])
        at = np.linspace(0.0, arc[-1], int(math.ceil(arc[-1] / spacing)) + 1)
        half = np.stack([np.interp(at, arc, w), np.interp(at, arc, e)], 1)
        from scipy.spatial import cKDTree

        tree = cKDTree(np.concatenate([half, half * [1.0, -1.0]]))
        return tree.query(pts, distance_upper_bound=within, workers=-1)[0].reshape(e0.shape)

    def separatrix_w_range(self) -> tuple[float, float] | tuple[Array, Array]:
        """The separatrix branch that flows into the saddle: w < −1/√2 if p+q<1, −1/√2 < w < 0 if p+q>1
        (floats outside transformations, arrays inside)."""
        p, q = floats(self.p, self.q)
        if all_float((p, q)):
            return (-math.inf, W_SADDLE) if p + q < 1 else (W_SADDLE, 0.0)
        below = p + q < 1
        return jnp.where(below, -jnp.inf, W_SADDLE), jnp.where(below, W_SADDLE, 0.0)

    def _theta_ew(self, theta: Theta) -> tuple[Array, Array]:
        return jnp.asarray(theta["e"], float), jnp.asarray(theta["w"], float)

    def theorem_applies(self) -> bool:
        """|p + q − 1| ≥ PQ_ONE_TOL: §4.4's closed forms hold (concrete p, q; True for traced ones)."""
        p, q = floats(self.p, self.q)
        return not (all_float((p, q)) and abs(p + q - 1.0) < PQ_ONE_TOL)

    def _require_theorem_regime(self, what: str) -> None:
        if not self.theorem_applies():  # checked only on concrete values (a traced p+q = 1 gives no error)
            raise ValueError(
                f"{what} needs p+q != 1, |p+q − 1| >= {PQ_ONE_TOL:g} (got p+q = "
                f"{float(self.p + self.q)!r}: A* = 0 to rounding and §4.4 does not apply)"
            )

    def predicted_basin(self, theta0: Theta) -> Array:
        """Index into ``ATTRACTORS`` of the profiled flow's limit from θ0 (§4.4); −1 for a fixed
        point that is no attractor (a local maximum on e = 0). ValueError when p+q = 1."""
        self._require_theorem_regime("predicted_basin")
        e0, w0 = self._theta_ew(theta0)
        E0 = e0**2 - s(w0)
        lo, hi = self.separatrix_w_range()
        on_branch = (w0 > lo) & (w0 < hi)
        local = (on_branch & (E0 < E_SADDLE)) | ((self.p + self.q >= 1) & (w0 >= 0))
        saddle = on_branch & (E0 == E_SADDLE)
        label = jnp.where(saddle, 2, jnp.where(local, 1, 0))
        # e0 = 0 is a fixed point: a local minimum, the saddle, or a local maximum (no attractor).
        at_rest = jnp.where(w0 == W_SADDLE, 2, jnp.where(self.is_local_min_w(w0), 1, -1))
        return jnp.where(e0 == 0, at_rest, label).astype(jnp.int32)

    def predicted_limit(self, theta0: Theta) -> Theta:
        """Closed-form limit of profiled gradient flow from θ0 (§4.4), one (unbatched) θ0.

        Global basin: w∞ is the root of (E0 + s(w))c(w) = A* on Γ*'s w-interval with the sign of w0,
        e∞ = sign(e0)·sqrt(E0 + s(w∞)). Local basin: e∞ = 0 and s(w∞) = −E0 on w0's branch.
        Separatrix: the saddle. w0 = 0 (invariant line): e∞² = A* (p+q<1) or e∞ = 0 (p+q>1).
        """
        if self.bias != "profiled":
            raise ValueError(
                "predicted_limit is available only for bias='profiled' (the energy is conserved only there)"
            )
        self._require_theorem_regime("predicted_limit")
        e0, w0 = self._theta_ew(theta0)
        A_star = self.optimal_gap()
        E0 = e0**2 - s(w0)
        label = self.predicted_basin(theta0)
        z_hi = jnp.maximum(10.0, jnp.log(jnp.abs(w0) + 1e-300) + 5.0)
        z_mid = math.log(-W_SADDLE)
        # ln|w∞| can be as low as −(E0 + A*): a start far out in e ends with w∞ below the smallest float, so the
        # roots are found, and s evaluated, in z = ln|w| (w itself may underflow to ±0 at the end)
        z_min = -(jnp.abs(E0) + jnp.abs(A_star) + 50.0)

        # global: the Γ* interval with the sign of w0: (−1/√2, 0) if A* > 0, else (−∞, −1/√2)
        neg_lo = jnp.where(A_star > 0, z_min, z_mid)
        neg_hi = jnp.where(A_star > 0, z_mid, z_hi)
        g_sign = jnp.where((w0 > 0) & (A_star > 0), 1.0, -1.0)
        g_lo = jnp.where(g_sign > 0, z_min, neg_lo)
        g_hi = jnp.where(g_sign > 0, z_hi, neg_hi)
        z_glob = bisect(lambda z: (E0 + _s_log(g_sign, z)) * _c_log(g_sign, z) - A_star, g_lo, g_hi)
        w_glob = g_sign * jnp.exp(z_glob)
        e_glob = jnp.sign(e0) * jnp.sqrt(jnp.maximum(E0 + _s_log(g_sign, z_glob), 0.0))
        # local: s(w) = −E0 on w0's branch
        l_sign = jnp.where(w0 > 0, 1.0, -1.0)
        l_lo = jnp.where(w0 < W_SADDLE, z_mid, z_min)
        l_hi = jnp.where((w0 > W_SADDLE) & (w0 < 0), z_mid, z_hi)
        w_loc = l_sign * jnp.exp(bisect(lambda z: _s_log(l_sign, z) + E0, l_lo, l_hi))
        # invariant line w0 = 0: e² → A* if A* > 0, else e → 0
        e_w0 = jnp.sign(e0) * jnp.sqrt(jnp.maximum(A_star, 0.0))
        e_inf = jnp.where(label == 0, e_glob, 0.0)
        w_inf = jnp.where(label == 0, w_glob, jnp.where(label == 1, w_loc, W_SADDLE))
        e_inf = jnp.where(w0 == 0, e_w0, e_inf)
        w_inf = jnp.where(w0 == 0, 0.0, w_inf)
        # fixed points stay where they are
        e_inf = jnp.where(e0 == 0, 0.0, e_inf)
        w_inf = jnp.where(e0 == 0, w0, w_inf)
        return {"e": e_inf, "w": w_inf}

    def classify_critical(self, theta: Theta) -> str:
        """Which critical set of §4.1 a point lies on exactly: 'global', 'local_min', 'local_max',
        'saddle' or 'none'."""
        e, w = float(theta["e"]), float(theta["w"])
        if e == 0.0:
            if w == W_SADDLE:
                return "saddle"
            return "local_min" if bool(self.is_local_min_w(w)) else "local_max"
        if math.isclose(float(self.gap(theta)), self.optimal_gap(), rel_tol=1e-12, abs_tol=1e-12):
            return "global"
        return "none"

    # ---- attractors and overlays for basin maps -------------------------------------------------
    def attractors(self):
        """Residuals vanishing on Γ* (logit error), on Γ_min (|e|, where (0, w) is a minimum) and at
        the saddle (distance)."""
        p, q = floats(self.p, self.q)
        if all_float((p, q)):
            f0_opt, f1_opt = math.log(p / (1 - p)), math.log((1 - q) / q)
        else:
            f0_opt, f1_opt = _log(p) - jnp.log1p(-p), jnp.log1p(-q) - _log(q)

        def global_(theta):
            f0, f1 = self.logits(theta)
            return jnp.maximum(jnp.abs(f0 - f0_opt), jnp.abs(f1 - f1_opt))

        def local(theta):
            return jnp.where(self.is_local_min_w(theta["w"]), jnp.abs(theta["e"]), jnp.inf)

        def saddle(theta):
            return jnp.hypot(theta["e"], theta["w"] - W_SADDLE)

        return {"global": global_, "local": local, "saddle": saddle}

    def overlays(self, x_axis: str, y_axis: str, x_range: tuple[float, float]) -> list[Overlay]:
        """Γ* (dashed), local minima/maxima on e = 0, the saddle and the separatrix, on the (w, e) plane."""
        if (x_axis, y_axis) != ("w", "e"):
            return []
        w = np.linspace(*x_range, 801)
        g, sep, is_min = map(np.asarray, _curves(self, w))
        lo, hi = self.separatrix_w_range()
        sep = np.where((w > lo) & (w < hi), sep, np.nan)
        zeros = np.zeros_like(w)
        dash = {"color": "k", "ls": "--", "lw": 1.2}
        out = [
            Overlay("Γ* (global minima)", "line", tuple(w), tuple(g), dash),
            Overlay("", "line", tuple(w), tuple(-g), dash),
            Overlay(
                "local minima (e = 0)",
                "line",
                tuple(w),
                tuple(np.where(is_min, zeros, np.nan)),
                {"color": "#67000d", "lw": 3},
            ),
            Overlay(
                "local maxima (e = 0)",
                "line",
                tuple(w),
                tuple(np.where(~is_min, zeros, np.nan)),
                {"color": "#08306b", "lw": 3},
            ),
            Overlay("separatrix", "line", tuple(w), tuple(sep), {"color": "orange", "lw": 1.8}),
            Overlay("", "line", tuple(w), tuple(-sep), {"color": "orange", "lw": 1.8}),
        ]
        if x_range[0] <= W_SADDLE <= x_range[1]:
            out.append(Overlay("saddle", "points", (W_SADDLE,), (0.0,), {"color": "k", "marker": "x", "s": 60}))
        return out
