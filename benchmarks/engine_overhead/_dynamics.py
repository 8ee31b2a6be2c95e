"""The Markov (e, w) dynamics as the hand kernels of the engine-overhead benchmark write them: the engine's
tolerances and status codes, the closed-form and the naive autodiff gradient of the profiled loss, and the
engine's curvature stopping test with its speed floor."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax

RTOL, ATOL, GTOL, DIVERGE = 1e-8, 1e-10, 1e-9, 1e8  # HEAD's defaults of gradient_flow / gradient_descent
PCOEFF, ICOEFF, MAX_STEPS = 0.3, 0.4, 100_000
NAN_CODE, DIVERGED_CODE, CONVERGED_CODE, MAX_STEPS_CODE = 4, 3, 0, 2  # popdyn.Status values
ROUNDOFF = 1e3  # popdyn.dynamics._stopping.ROUNDOFF (the curvature rule's speed floor, in ε·‖f(θ0)‖)


def closed_grad(prob):
    """∇L(e, w) = ℓ'(A)·(2c(w)e, 4|w|e²), A = c(w)e², c(w) = 1 + 2w|w|, ℓ' = ``prob.profile_slope``."""
    slope = prob.profile_slope if hasattr(prob, "profile_slope") else jax.grad(prob.profile_loss)

    def grad(theta):
        e, w = theta["e"], theta["w"]
        c = 1.0 + 2.0 * w * jnp.abs(w)
        s = slope(c * e * e)
        return {"e": 2.0 * c * e * s, "w": 4.0 * jnp.abs(w) * e * e * s}

    return grad


def naive_grad(prob):
    """Autodiff straight through the profiled cross-entropy (f0*, f1* and logaddexp), bypassing the custom_jvp of the
    profiled loss; None when this version of Canonical has no such pieces."""
    if not (hasattr(prob, "_cross_entropy") and hasattr(prob, "profiled_logits")):
        return None
    return jax.grad(lambda t: prob._cross_entropy(*prob.profiled_logits(prob.gap(t))))


def curvature_steady(field, y, tol, floor):
    """popdyn.dynamics._stopping.steady: ‖f‖³ ≤ tol·(−fᵀJf) or ‖f‖ ≤ floor."""
    f, jf = jax.jvp(field, (y,), (field(y),))
    speed2 = optax.tree.vdot(f, f)
    speed = jnp.sqrt(speed2)
    return (speed2 * speed <= tol * -optax.tree.vdot(f, jf)) | (speed <= floor)


def speed_floor(speed0):
    return ROUNDOFF * jnp.finfo(speed0.dtype).eps * speed0
