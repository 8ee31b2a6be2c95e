"""The pieces of a descent step as optax gradient transformations (docs/dynamics.md, "A step as a chain").

Gradient descent's step is a chain u ← ∇L(θ) (or a stochastic gradient), then P(u), then u + σξ, then τ ⊙ u, then
the optimizer: heavy ball b ← μb + u and −η b by default, or any optax transformation. Each piece below is one link,
so they compose with optax's own (``optax.trace``, ``optax.scale_by_adam``, …) in any order, inside an optimizer
factory lr → transformation that ``GradientDescent`` calls with each start's own learning rate. Randomness comes
from the ``key`` extra argument that ``GradientDescent`` passes to every link's ``update`` (one key per start and
step, from its ``seed``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import jax
import optax
from jaxtyping import Array

from popdyn import _validate
from popdyn._batching import apply_scales
from popdyn.problem import Theta


def preconditioned(precondition: Callable[[Theta], Theta]) -> optax.GradientTransformation:
    """u ↦ P(u): a fixed gradient → direction map (stateless).

    **Arguments:** ``precondition`` the map P (a function or an equinox Module; its array fields trace as leaves)."""
    if not callable(precondition):
        raise ValueError(f"precondition={precondition!r} is invalid: must be a callable gradient -> direction")

    def update(updates, state, params=None):
        del params
        return precondition(updates), state

    return optax.GradientTransformation(lambda params: optax.EmptyState(), update)


def block_rates(rates: Mapping[str, float]) -> optax.GradientTransformation:
    """u_b ↦ τ_b u_b for each named top-level block b of a dict θ, other blocks unchanged: per-block learning-rate
    multipliers (stateless).

    **Arguments:** ``rates`` {block: τ_b > 0}."""
    if not isinstance(rates, Mapping) or not rates:
        raise ValueError(f"rates={rates!r} is invalid: must map top-level blocks of θ to multipliers > 0")
    scales = {k: _validate.positive(f"rates[{k!r}]", v) for k, v in rates.items()}

    def update(updates, state, params=None):
        del params
        _check_blocks("block_rates", scales, updates)
        return apply_scales(updates, scales), state

    return optax.GradientTransformation(lambda params: optax.EmptyState(), update)


def _check_blocks(link: str, named: Mapping[str, float], updates: Theta) -> None:
    """Every block ``named`` is a top-level block of the dict ``updates``."""
    if not isinstance(updates, dict) or set(named) - set(updates):
        allowed = sorted(updates) if isinstance(updates, dict) else "none: θ is not a dict"
        unknown = sorted(set(named) - set(updates)) if isinstance(updates, dict) else sorted(named)
        raise ValueError(f"{link} names unknown parameter(s) {unknown}: allowed {allowed}")


def _stds(std: float | Mapping[str, float], updates: Theta) -> list[float]:
    """σ for every leaf of ``updates``: one number, or the σ of the leaf's top-level block (0 where not named)."""
    leaves = jax.tree_util.tree_leaves(updates)
    if not isinstance(std, Mapping):
        return [std] * len(leaves)
    _check_blocks("gaussian_noise", std, updates)
    full = {k: jax.tree_util.tree_map(_constant(std.get(k, 0.0)), v) for k, v in updates.items()}
    return jax.tree_util.tree_leaves(full)  # the structure of updates, so its leaves' order


def _constant(value: float) -> Callable[[Array], float]:
    return lambda _: value


def gaussian_noise(std: float | Mapping[str, float]) -> optax.GradientTransformationExtraArgs:
    """u ↦ u + σ ⊙ ξ with ξ ~ N(0, I), drawn from the ``key`` extra argument of ``update`` (one independent draw per
    leaf, from ``jax.random.split(key, number of leaves)``); stateless.

    **Arguments:** ``std`` σ ≥ 0, one number or {top-level block of θ: σ_b} (blocks not named get no noise)."""
    if isinstance(std, Mapping):
        std = {k: _validate.positive(f"std[{k!r}]", v, allow_zero=True) for k, v in std.items()}
    else:
        std = _validate.positive("std", std, allow_zero=True)

    def update(updates, state, params=None, *, key: Array | None = None, **extra_args):
        del params, extra_args
        if key is None:
            raise ValueError("gaussian_noise needs a PRNG key: call update(..., key=key) (GradientDescent passes one)")
        leaves, tree = jax.tree_util.tree_flatten(updates)
        keys = jax.random.split(key, len(leaves))
        stds = _stds(std, updates)
        noisy = [x + s * jax.random.normal(k, x.shape, x.dtype) for x, s, k in zip(leaves, stds, keys, strict=True)]
        return jax.tree_util.tree_unflatten(tree, noisy), state

    return optax.GradientTransformationExtraArgs(lambda params: optax.EmptyState(), update)
