"""The paper's training procedure (docs/models/teacher.md §8): online GD with a fresh Gaussian batch every step, as a
``gradient=`` hook of ``gradient_descent`` — the noisy counterpart of the exact population run."""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array

from popdyn.problem import Theta
from popdyn.tasks.teacher._model import BilinearTeacher


class OnlineGradient(eqx.Module):
    """(θ, key) ↦ ∇ of the batch mean of ½‖Y − σ(WXS)‖² over ``batch`` fresh draws (X, Y) of the teacher (§2):
    an unbiased estimate of ∇L (autodiff through σ, so relu'(0) follows ``jnp.maximum``'s tie rule)."""

    prob: BilinearTeacher
    batch: int = eqx.field(static=True)

    def __call__(self, theta: Theta, key: Array) -> Theta:
        X, Y = self.prob.sample(key, self.batch)

        def batch_loss(th):
            return 0.5 * jnp.mean(jnp.sum((Y - self.prob.student_output(th, X)) ** 2, axis=(-2, -1)))

        return jax.grad(batch_loss)(theta)


def cosine(prob: BilinearTeacher, theta: Theta) -> jax.Array:
    """cos(W, V*) = ⟨W, V*⟩_F / (‖W‖_F‖V*‖_F), the paper's similarity (§8; 0 at W = 0)."""
    norm = jnp.linalg.norm(theta["W"]) * jnp.sqrt(prob.v)
    return jnp.where(norm > 0, jnp.sum(theta["W"] * prob.V_star) / jnp.where(norm > 0, norm, 1.0), 0.0)
