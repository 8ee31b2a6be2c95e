"""Per-point cost of the building blocks of the Markov (e, w) dynamics (XLA cost analysis: flops and
transcendentals), for the engine-overhead benchmark."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax

from ._dynamics import ATOL, DIVERGE, RTOL, closed_grad, curvature_steady, naive_grad


def building_blocks(prob) -> list[dict]:
    """flops and transcendentals per point of one evaluation of each building block, vmapped over 1,024 points."""
    n = 1024
    x = {"e": jnp.linspace(-2, 2, n), "w": jnp.linspace(-1.9, 2.1, n)}

    def field(z):
        return jax.tree_util.tree_map(jnp.negative, jax.grad(prob.loss)(z))

    blocks = {
        "closed-form gradient": closed_grad(prob),
        "jax.grad(prob.loss)": jax.grad(prob.loss),
        "naive autodiff (no custom_jvp)": naive_grad(prob),
        "value_and_grad(prob.loss)": jax.value_and_grad(prob.loss),
        "steady test, norm (field + 2 norms)": lambda y: optax.tree.norm(field(y)) < ATOL + RTOL * optax.tree.norm(y),
        "steady test, curvature (field + jvp)": lambda y: curvature_steady(
            field, y, ATOL + RTOL * optax.tree.norm(y), 0.0
        ),
        "divergence bookkeeping (norm + 3 where)": lambda y: jax.tree_util.tree_map(
            lambda a: jnp.where(~jnp.isfinite(optax.tree.norm(y)) | (optax.tree.norm(y) > DIVERGE), a, a + 1.0), y
        ),
        "PRNG fold_in + split": lambda y: jax.random.split(
            jax.random.fold_in(jax.random.PRNGKey(0), y["e"].astype(jnp.int32))
        ),
    }
    rows = []
    for name, f in blocks.items():
        if f is None:
            continue
        try:
            ca = jax.jit(jax.vmap(f)).lower(x).compile().cost_analysis()
            ca = ca[0] if isinstance(ca, (list, tuple)) else ca
            rows.append(
                {
                    "block": name,
                    "flops": float(ca.get("flops", float("nan"))) / n,
                    "transcendentals": float(ca.get("transcendentals", float("nan"))) / n,
                }
            )
        except Exception as exc:  # cost analysis is information only: any failure is recorded, not raised
            rows.append({"block": name, "error": repr(exc)})
    return rows
