"""The reduced attention dynamics of Scan and Snap: Eq. (10) with the decoder replaced by its Theorem 1
form (docs/models/scan_snap.md §5, Lemma 4).

  ż_m = η_Z γ(t) Σ_{n∈ψ⁻¹(m)} diag(f_n) Σ_{n'≠n} β_{nn'} (f_n f_nᵀ − I) f_{n'},   β_{nn'} = f_nᵀ f_{n'},

with γ(t) of Eq. (85) (Lemma 6, the class count K and vocabulary M of the problem) and β at leading order.
Under it the Theorem 3 invariant is exact: ż_{ml} ∝ f_{nl}² with one factor for every distinct l of n.
"""

from __future__ import annotations

import diffrax
import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, Float

from popdyn import _validate
from popdyn.tasks.scan_snap._closed_forms import gamma
from popdyn.tasks.scan_snap._model import ScanSnap


def attention_velocity(prob: ScanSnap, Z: Float[Array, "M M"], gamma_t, eta_z) -> Float[Array, "M M"]:
    """Right side of Eq. (10) at Z for a given γ(t): ż_m = η_Z γ(t) Σ_{n∈ψ⁻¹(m)} diag(f_n) Σ_{n'≠n} β_{nn'}
    (f_n f_nᵀ − I) f_{n'}, with β_{nn'} = f_nᵀ f_{n'} (§5, Lemma 4).

    **Arguments:**

    - ``prob``: the ``ScanSnap`` problem; ``Z``: the M × M attention logits.
    - ``gamma_t``: the speed-control coefficient γ(t) (``gamma``); ``eta_z``: the attention rate η_Z.
    """
    f = prob.features({"Z": Z})
    G = f @ f.T
    beta = G * (1.0 - jnp.eye(prob.K, dtype=G.dtype))
    v = jnp.sum(beta * G, axis=1)[:, None] * f - beta @ f  # Σ_{n'} β_{nn'} (f_n f_nᵀ − I) f_{n'}
    return eta_z * gamma_t * jnp.zeros_like(Z).at[prob.query].add(f * v)


def reduced_attention_flow(
    prob: ScanSnap,
    ts: Float[Array, " S"],
    eta_y: float,
    eta_z: float,
    Z0: Float[Array, "M M"] | None = None,
    *,
    rtol: float = 1e-10,
    atol: float = 1e-12,
    max_steps: int = 100_000,
) -> tuple[Float[Array, "S M M"], Array]:
    """Z at the times ``ts`` (increasing, from 0) under Eq. (10), and whether the solve succeeded.

    Non-success leaves diffrax's inf padding in the unreached rows, reported by the code, never hidden.
    Solved by diffrax's Tsit5 with a PID step-size controller, γ(t) from ``gamma`` (Lemma 6's h).

    **Arguments:**

    - ``prob``: the ``ScanSnap`` problem.
    - ``ts``: the record times, increasing, the first the start (usually 0).
    - ``eta_y``, ``eta_z``: the decoder and attention rates η_Y, η_Z > 0.
    - ``Z0``: the M × M attention logits at ``ts[0]`` (None: zero).
    - ``rtol``, ``atol``: the solver's tolerances; ``max_steps``: its step budget.
    """
    _validate.positive("eta_y", eta_y)
    _validate.positive("eta_z", eta_z)
    ts = jnp.asarray(ts, dtype=prob.probs.dtype)
    Z0 = jnp.zeros((prob.M, prob.M), prob.probs.dtype) if Z0 is None else jnp.asarray(Z0, prob.probs.dtype)
    return _solve(prob, ts, jnp.asarray(eta_y, ts.dtype), jnp.asarray(eta_z, ts.dtype), Z0, rtol, atol, max_steps)


@eqx.filter_jit
def _solve(prob, ts, eta_y, eta_z, Z0, rtol, atol, max_steps):
    def rhs(t, Z, args):
        return attention_velocity(prob, Z, gamma(t, prob.K, prob.M, eta_y), eta_z)

    sol = diffrax.diffeqsolve(
        diffrax.ODETerm(rhs),
        diffrax.Tsit5(),
        t0=ts[0],
        t1=ts[-1],
        dt0=None,
        y0=Z0,
        saveat=diffrax.SaveAt(ts=ts),
        stepsize_controller=diffrax.PIDController(rtol=rtol, atol=atol),
        max_steps=max_steps,
        throw=False,
    )
    return sol.ys, sol.result == diffrax.RESULTS.successful
