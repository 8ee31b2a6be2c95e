"""Out-of-distribution error (docs/models/teacher.md §7): the student against the teacher on shifted inputs X̃.

With Ỹ = f*(X̃) + independent zero-mean noise, the excess OOD loss is L_OOD(θ) − L_OOD(teacher) =
½E‖σ(W X̃ S) − σ(V* X̃ S*)‖²_F. For the identity σ and X̃ with i.i.d. entries of mean m and variance s² it is
exact (columns of S and S* sum to 1): ½[s²‖Sᵀ⊗W − S*ᵀ⊗V*‖² + m²D‖(W − V*)1_d‖²]. Otherwise it is estimated by
Monte Carlo, e.g. ReLU with Exp(1) inputs as in the paper's experiments.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from popdyn import _validate
from popdyn.problem import Theta
from popdyn.tasks.teacher._model import BilinearTeacher


def ood_excess_linear(prob: BilinearTeacher, theta: Theta, mean: float = 1.0, var: float = 1.0) -> Float[Array, ""]:
    """Exact ½E‖W X̃ S − V* X̃ S*‖² for X̃_ab i.i.d. with ``mean`` m and variance ``var`` s² (any law):
    ½[s²(‖W‖²‖S‖² − 2⟨W,V*⟩⟨S,S*⟩ + ‖V*‖²‖S*‖²) + m²D‖(W − V*)1_d‖²] (§7). Identity σ only (ValueError
    otherwise: use ``ood_excess_mc``).

    **Arguments:**

    - ``prob``: the ``BilinearTeacher``; ``theta``: the student {"W", "A"}.
    - ``mean``: the entries' mean m; ``var``: their variance s² ≥ 0.
    """
    if float(prob.alpha) != 1.0:
        raise ValueError(
            f"activation has alpha={float(prob.alpha)}: the exact OOD loss needs the identity "
            "(alpha = 1); use ood_excess_mc"
        )
    var = _validate.positive("var", var, allow_zero=True)
    mean = _validate.finite("mean", mean)
    W, S, V, Ss = theta["W"], prob.attention(theta), prob.V_star, prob.S_star
    kron = jnp.sum(W**2) * jnp.sum(S**2) - 2 * jnp.sum(W * V) * jnp.sum(S * Ss) + jnp.sum(V**2) * jnp.sum(Ss**2)
    drift = jnp.sum(((W - V) @ jnp.ones(prob.d)) ** 2)
    return 0.5 * (var * kron + mean**2 * prob.D * drift)


def ood_excess_mc(
    prob: BilinearTeacher, theta: Theta, key: Array, n: int, rate: float = 1.0
) -> tuple[Float[Array, ""], Float[Array, ""]]:
    """Monte Carlo (estimate, standard error) of ½E‖σ(W X̃ S) − σ(V* X̃ S*)‖² from ``n`` draws of X̃ with
    i.i.d. Exp(``rate``) entries (mean 1/rate, variance 1/rate²), for any activation (§7, §8).

    **Arguments:**

    - ``prob``: the ``BilinearTeacher``; ``theta``: the student {"W", "A"}.
    - ``key``: the PRNG key of the draws; ``n``: the number of draws (≥ 2).
    - ``rate``: the exponential rate of the entries (> 0).
    """
    return _ood_mc(prob, theta, key, _validate.int_at_least("n", n, 2), _validate.positive("rate", rate))


@eqx.filter_jit
def _ood_mc(prob: BilinearTeacher, theta: Theta, key: Array, n: int, rate):
    X = jax.random.exponential(key, (n, prob.d, prob.D)) / rate
    per = 0.5 * jnp.sum((prob.student_output(theta, X) - prob.teacher_output(X)) ** 2, axis=(-2, -1))
    return jnp.mean(per), jnp.std(per, ddof=1) / jnp.sqrt(n)
