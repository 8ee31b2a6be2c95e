"""Attention metrics of Scan and Snap: entropy on distinct tokens, the Theorem 3 scan invariant and growth
factors (docs/models/scan_snap.md §5 Theorem 3, §6 Fig. 6).

All take θ with or without a leading batch axis and return per-class quantities; entries off a class's
distinct tokens are NaN, so they can never be mistaken for values.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from popdyn.problem import Theta
from popdyn.tasks.scan_snap._data import distinct_mask
from popdyn.tasks.scan_snap._model import ScanSnap


def distinct_entropy(prob: ScanSnap, theta: Theta) -> Float[Array, "*B"]:
    """Mean over classes of the entropy of c_n restricted to G_DT(n) and renormalised ([our choice] for
    Fig. 6's metric, whose formula is [unknown]: at Z = 0 it is the entropy of P on the distinct tokens,
    2.1513 for the Syn sets).

    **Arguments:**

    - ``prob``: the ``ScanSnap`` problem; ``theta``: θ = {"Y", "Z"}, with or without a leading batch axis.
    """
    mask = distinct_mask(prob.probs)
    c = jnp.where(mask, _attention(prob, theta), 0.0)
    c = c / jnp.sum(c, axis=-1, keepdims=True)
    ent = -jnp.sum(jnp.where(c > 0, c * jnp.log(jnp.where(c > 0, c, 1.0)), 0.0), axis=-1)
    return jnp.mean(ent, axis=-1)


def _attention(prob: ScanSnap, theta: Theta) -> Float[Array, "*B K M"]:
    Z = theta["Z"]
    flat = Z.reshape(-1, *Z.shape[-2:])
    out = jax.vmap(lambda z: prob.attention({"Z": z}))(flat)
    return out.reshape(*Z.shape[:-2], *out.shape[-2:])


def logit_change(prob: ScanSnap, theta: Theta, theta0: Theta) -> Float[Array, "*B K M"]:
    """Δz_{ψ(n), l} = z_{ψ(n), l}(t) − z_{ψ(n), l}(0) for every class n and token l (§5): how far the query's
    attention logit on each token has moved.

    **Arguments:**

    - ``prob``: the ``ScanSnap`` problem.
    - ``theta``: θ at time t, ``theta0``: θ at time 0 (each with or without the same leading batch axis).
    """
    return theta["Z"][..., prob.query, :] - theta0["Z"][..., prob.query, :]


def growth_factor(prob: ScanSnap, theta: Theta, theta0: Theta) -> Float[Array, "*B K M"]:
    """χ_l(t) = e^{2Δz_{ml}} on each class's distinct tokens (Theorem 3), NaN elsewhere: the factor by which the
    relative gain f_{nl}²/f_{nl'}² − 1 of token l grows.

    **Arguments:**

    - ``prob``: the ``ScanSnap`` problem.
    - ``theta``: θ at time t, ``theta0``: θ at time 0 (each with or without the same leading batch axis).
    """
    return jnp.where(distinct_mask(prob.probs), jnp.exp(2 * logit_change(prob, theta, theta0)), jnp.nan)


def scan_invariant(prob: ScanSnap, theta: Theta, theta0: Theta) -> Float[Array, "*B K M"]:
    """I_l = (1 − e^{−2Δz_{ml}})/c̃_{l|n}(0)², c̃_{l|n}(0) = P(l|n) e^{z_{ml}(0)}: the same for every distinct
    token l of class n under Eq. (10) (Theorem 3); NaN off the distinct tokens.

    **Arguments:**

    - ``prob``: the ``ScanSnap`` problem.
    - ``theta``: θ at time t, ``theta0``: θ at time 0 (each with or without the same leading batch axis).
    """
    z0 = theta0["Z"][..., prob.query, :]
    c0 = prob.probs * jnp.exp(z0)
    I = -jnp.expm1(-2 * logit_change(prob, theta, theta0)) / c0**2  # noqa: E741 (the paper's I_l)
    return jnp.where(distinct_mask(prob.probs), I, jnp.nan)


def invariant_spread(prob: ScanSnap, theta: Theta, theta0: Theta) -> Float[Array, "*B K 2"]:
    """(min, max) over each class's distinct tokens of I_l / mean_l I_l (``scan_invariant``): (1, 1) when the
    invariant holds, which it does exactly under Eq. (10) and approximately in the full joint flow (§5).

    **Arguments:**

    - ``prob``: the ``ScanSnap`` problem.
    - ``theta``: θ at time t, ``theta0``: θ at time 0 (each with or without the same leading batch axis).
    """
    I = scan_invariant(prob, theta, theta0)  # noqa: E741 (the paper's I_l)
    ratio = I / jnp.nanmean(I, axis=-1, keepdims=True)
    return jnp.stack([jnp.nanmin(ratio, axis=-1), jnp.nanmax(ratio, axis=-1)], axis=-1)
