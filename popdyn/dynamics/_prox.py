"""Proximal maps applied after each descent step (proximal gradient descent, optax-style).

A prox is a callable (θ, η) → θ'; an equinox Module so its parameters trace through ``jit``.
"""

from __future__ import annotations

import equinox as eqx
import jax.numpy as jnp

from popdyn import _validate
from popdyn.problem import Theta


def soft_threshold(z, threshold):
    """S_θ(z) = sign(z)·max(|z| − θ, 0), entrywise: the prox of θ‖·‖₁."""
    return jnp.sign(z) * jnp.maximum(jnp.abs(z) - threshold, 0.0)


class L1Prox(eqx.Module):
    """θ_b ← S_{η λ_b}(θ_b) for each block b with a penalty λ_b‖θ_b‖₁ (blocks not named are left alone)."""

    strength: dict

    def __init__(self, strength: dict[str, float]):
        if not isinstance(strength, dict) or not strength:
            raise ValueError(f"strength={strength!r} is invalid: must map parameter names to penalties λ >= 0")
        self.strength = {k: _validate.positive(f"strength[{k!r}]", v, allow_zero=True) for k, v in strength.items()}

    def __call__(self, theta: Theta, lr) -> Theta:
        unknown = set(self.strength) - set(theta)
        if unknown:
            raise ValueError(f"L1Prox names unknown parameter(s) {sorted(unknown)}: allowed {sorted(theta)}")
        return {k: soft_threshold(v, lr * self.strength[k]) if k in self.strength else v for k, v in theta.items()}
