"""The ``Problem`` contract every model implements, built-in or a user's own (docs/problem.md).

A Problem is an equinox Module (a pytree) holding the data distribution's parameters as array leaves. Its
``loss(theta)`` is the exact population loss, a pure JAX function of the parameter pytree θ (any pytree of
float arrays, a single flat array included), so it jits, differentiates and vmaps.
``Problem.from_loss(loss_fn, init)`` turns a plain function into a Problem, and
``Problem.from_examples(example_loss, init, data=measure)`` a per-example loss ℓ(θ, x) averaged over an exact
measure of examples, L(θ) = Σ_i w_i ℓ(θ, x_i), whose examples stay available (``examples()``, ``example_loss``).
"""

from __future__ import annotations

import abc
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeAlias

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float, PyTree, Real

from popdyn._xla import warn_unguarded
from popdyn.exact._product import ProductDistribution
from popdyn.exact._tables import WeightedTable

Theta: TypeAlias = PyTree[Float[Array, "..."]]
"""A parameter pytree θ as the engine holds it: float JAX arrays."""
ThetaLike: TypeAlias = PyTree[Real[ArrayLike, "..."]]
"""θ (or a batch of θ) as a caller may give it: NumPy arrays and Python numbers too, converted to float arrays."""
Measure: TypeAlias = WeightedTable | ProductDistribution
"""A data distribution of examples whose points and weights are enumerated exactly (docs/problem.md, "Per-example
data"): a ``popdyn.exact.WeightedTable`` (Gauss–Hermite nodes included: ``GaussHermite(d, degree).table(mean,
cov)``) or a ``popdyn.exact.ProductDistribution``."""


@dataclass(frozen=True)
class Overlay:
    """Something a task knows about a 2-D slice of its landscape, to draw over a basin map.

    ``kind`` is "line" (polyline through x, y; NaN breaks it) or "points"; coordinates are in the
    slice's (x, y) axes, as tuples or float arrays.
    """

    label: str
    kind: str
    x: tuple[float, ...] | Float[np.ndarray, " n"]
    y: tuple[float, ...] | Float[np.ndarray, " n"]
    style: dict = field(default_factory=dict)


class Problem(eqx.Module):
    """A data distribution + a model + its exact population loss (docs/problem.md).

    Required: ``loss(θ)`` → a float scalar for one unbatched θ, and ``init(key)`` → one θ drawn with ``key``.
    Optional: ``attractors()`` (name → residual(θ) ≥ 0, a float scalar vanishing exactly on the set),
    ``overlays(x, y, x_range)`` for figures, and per-example data: ``examples()`` (a ``Measure`` of examples x) with
    ``example_loss(θ, x)`` = ℓ(θ, x), such that L(θ) = E_x ℓ(θ, x). Numbers that describe the data are array
    leaves, never static fields: a new value compiles nothing and a stack of problems vmaps. Static fields fix shapes
    only.
    """

    @abc.abstractmethod
    def loss(self, theta: ThetaLike) -> Float[Array, ""]:
        """The exact population loss L(θ) for one (unbatched) parameter pytree."""

    @abc.abstractmethod
    def init(self, key: Array) -> Theta:
        """A default initialisation (the paper's, where it has one), drawn with ``key``."""

    def attractors(self) -> dict[str, Callable[[Theta], Float[Array, ""]]]:
        """Known attractors from theory: name → residual(θ) ≥ 0 that vanishes exactly on the set.

        Empty when theory gives none; basin maps then classify end points by their features instead.
        """
        return {}

    def overlays(self, x_axis: str, y_axis: str, x_range: tuple[float, float]) -> list[Overlay]:
        """Known critical sets, separatrices etc. on the (x_axis, y_axis) slice (default: none)."""
        return []

    def examples(self) -> Measure:
        """The examples x the loss averages, L(θ) = E_x ℓ(θ, x) = Σ_i w_i ℓ(θ, x_i): an exact ``Measure``.

        A problem that declares none (the default) raises ValueError naming its class.
        """
        raise ValueError(_no_examples(self))

    def example_loss(self, theta: ThetaLike, x: PyTree) -> Float[Array, ""]:
        """ℓ(θ, x) of one example x (one point of ``examples()``): a float scalar.

        A problem that declares no examples (the default) raises ValueError naming its class.
        """
        raise ValueError(_no_examples(self))

    def template(self) -> PyTree[jax.ShapeDtypeStruct]:
        """Shapes and dtypes of one parameter pytree (no computation)."""
        return jax.eval_shape(lambda: self.init(jax.random.PRNGKey(0)))  # the key too is only traced

    def n_params(self) -> int:
        """Number of scalar parameters."""
        return sum(math.prod(t.shape) for t in jax.tree_util.tree_leaves(self.template()))

    @staticmethod
    def from_loss(
        loss: Callable,
        init: Callable[[Array], Theta] | ThetaLike,
        *,
        data: PyTree | None = None,
        init_scale: float = 1.0,
        attractors: dict[str, Callable] | None = None,
        overlays: Callable | None = None,
    ) -> FunctionProblem:
        """A Problem from a plain function: ``loss(θ)``, or ``loss(θ, data)`` when ``data`` is given.

        ``init`` is a function key → θ, or an example θ: then ``init(key)`` draws each entry from
        N(example, init_scale²). ``data`` (a pytree of numbers) is stored as array leaves, so a new value
        compiles nothing and problems built with stacked data vmap. ``attractors`` maps names to residual
        functions θ → float ≥ 0 (or θ, data → float with ``data``); ``overlays`` is the method's signature.
        """
        if not callable(loss):
            raise ValueError(f"loss={loss!r} is invalid: must be a function θ -> scalar (or θ, data -> scalar)")
        init_fn, example, scale, residuals = _common_arguments(init, init_scale, attractors)
        data = None if data is None else _float_tree("data", data)
        prob = FunctionProblem(loss, init_fn, example, scale, data, residuals, overlays)
        check_problem(prob)
        return prob

    @staticmethod
    def from_examples(
        example_loss: Callable,
        init: Callable[[Array], Theta] | ThetaLike,
        *,
        data: Measure,
        init_scale: float = 1.0,
        attractors: dict[str, Callable] | None = None,
        overlays: Callable | None = None,
    ) -> ExampleProblem:
        """A Problem from a per-example loss ``example_loss(θ, x)`` and an exact measure ``data`` of examples x.

        L(θ) = E_x ℓ(θ, x) = Σ_i w_i ℓ(θ, x_i), the measure's own exact sum (``data.expectation``), and the
        problem keeps its examples (``examples()``, ``example_loss``) for what needs them one by one, such as
        the exact gradient noise of SGD (``popdyn.gradient_noise``).

        **Arguments:**

        - ``example_loss``: a function (θ, x) → float scalar, x one point of ``data`` (a pytree like one row of a
          ``WeightedTable``'s points; the (d,) vector of values of a ``ProductDistribution``).
        - ``init``: as for ``from_loss``: a function key → θ, or an example θ perturbed by N(0, init_scale²).
        - ``data``: a ``Measure``: a ``popdyn.exact.WeightedTable`` or ``ProductDistribution``, kept as it is
          (its points keep their dtype, integer tokens included); its numbers are array leaves, so another
          measure of the same shapes compiles nothing.
        - ``init_scale``, ``overlays``: as for ``from_loss``.
        - ``attractors``: name → residual function (θ, data) → float ≥ 0, ``data`` being the measure (as for
          ``from_loss`` with data).
        """
        if not callable(example_loss):
            raise ValueError(f"example_loss={example_loss!r} is invalid: must be a function (θ, x) -> float scalar")
        measure = check_measure("data", data)
        init_fn, example, scale, residuals = _common_arguments(init, init_scale, attractors)
        prob = ExampleProblem(ExpectedLoss(example_loss), init_fn, example, scale, measure, residuals, overlays)
        check_problem(prob)
        return prob


def _no_examples(prob: Problem) -> str:
    return (
        f"{type(prob).__name__} declares no per-example data (examples() and example_loss(θ, x) are not "
        "implemented): build it with popdyn.Problem.from_examples(example_loss, init, data=measure), or implement "
        "both methods in the class"
    )


def check_measure(name: str, data) -> Measure:
    """``data`` when it is a ``Measure`` (a ``WeightedTable`` or a ``ProductDistribution``), else ValueError.

    **Arguments:**

    - ``name``: how the error names the value (``"data"``, ``"prob.examples()"``).
    - ``data``: the object to check.
    """
    if not isinstance(data, (WeightedTable, ProductDistribution)):
        raise ValueError(
            f"{name} is a {type(data).__name__}: must be a popdyn.exact measure whose points and weights are "
            "enumerated exactly, a WeightedTable (Gaussian inputs: GaussHermite(d, degree).table(mean, cov)) or a "
            "ProductDistribution"
        )
    return data


def _common_arguments(init, init_scale, attractors) -> tuple[Callable | None, PyTree | None, float, tuple]:
    """``from_loss``'s and ``from_examples``' shared arguments, checked: (init function or None, example θ or None,
    init_scale, the attractors as (name, residual) pairs)."""
    if callable(init):
        init_fn, example = init, None
    else:
        init_fn, example = None, _float_tree("init", init)
    if not (isinstance(init_scale, (int, float)) and math.isfinite(init_scale) and init_scale >= 0):
        raise ValueError(f"init_scale={init_scale!r} is out of range: must be a finite number in [0, inf)")
    if attractors is not None and (
        not isinstance(attractors, dict) or not all(isinstance(k, str) and callable(v) for k, v in attractors.items())
    ):
        raise ValueError(f"attractors={attractors!r} is invalid: must be a dict name -> residual function")
    return init_fn, example, float(init_scale), tuple((attractors or {}).items())


def _float_tree(name: str, tree) -> PyTree:
    """Every leaf of ``tree`` as a float array in the default float dtype; ValueError naming the bad leaf."""
    leaves, treedef = jax.tree_util.tree_flatten_with_path(tree)
    if not leaves:
        raise ValueError(f"{name}={tree!r} is invalid: must hold at least one array")
    out = []
    for path, leaf in leaves:
        try:
            arr = np.asarray(leaf)
        except (TypeError, ValueError):
            arr = np.asarray(None)
        if not (np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)) or arr.dtype == bool:
            raise ValueError(
                f"{name}{jax.tree_util.keystr(path)}={leaf!r} is invalid: must be an array of real numbers"
            )
        out.append(jnp.asarray(arr, dtype=jnp.result_type(float)))
    return jax.tree_util.tree_unflatten(treedef, out)


class FunctionProblem(Problem):
    """A Problem made by ``Problem.from_loss``: the functions are static (compiled once), the data are leaves."""

    loss_fn: Callable = eqx.field(static=True)
    init_fn: Callable | None = eqx.field(static=True)
    example: PyTree | None
    init_scale: float = eqx.field(static=True)
    data: PyTree | None
    residuals: tuple = eqx.field(static=True)
    overlay_fn: Callable | None = eqx.field(static=True)

    def loss(self, theta: ThetaLike) -> Float[Array, ""]:
        """L(θ) = ``loss_fn(θ)`` or ``loss_fn(θ, data)``."""
        return self.loss_fn(theta) if self.data is None else self.loss_fn(theta, self.data)

    def init(self, key: Array) -> Theta:
        """``init_fn(key)``, or the example plus N(0, init_scale²) noise drawn with ``key``."""
        if self.init_fn is not None:
            return self.init_fn(key)
        leaves, treedef = jax.tree_util.tree_flatten(self.example)
        keys = jax.random.split(key, len(leaves))
        return jax.tree_util.tree_unflatten(
            treedef,
            [x + self.init_scale * jax.random.normal(k, x.shape, x.dtype) for x, k in zip(leaves, keys, strict=False)],
        )

    def attractors(self) -> dict[str, Callable]:
        """The residuals given to ``from_loss`` (with ``data`` bound when the problem has data)."""
        if self.data is None:
            return dict(self.residuals)
        return {name: (lambda theta, fn=fn: fn(theta, self.data)) for name, fn in self.residuals}

    def overlays(self, x_axis: str, y_axis: str, x_range: tuple[float, float]) -> list[Overlay]:
        """The ``overlays`` function given to ``from_loss`` (default: none)."""
        return [] if self.overlay_fn is None else list(self.overlay_fn(x_axis, y_axis, x_range))


@dataclass(frozen=True)
class ExpectedLoss:
    """L(θ, data) = E_x ℓ(θ, x) = Σ_i w_i ℓ(θ, x_i) over a ``Measure`` ``data``, ℓ = ``example_loss``.

    Equal (and hashed alike) when ℓ is the same function, so problems built from one ℓ share compiled programs.
    """

    example_loss: Callable

    def at(self, theta: ThetaLike, x: PyTree) -> Float[Array, ""]:
        """ℓ(θ, x), checked while tracing to be a float scalar."""
        out = jnp.asarray(self.example_loss(theta, x))
        if not (jnp.shape(out) == () and jnp.issubdtype(jnp.result_type(out), jnp.floating)):
            got = f"shape {jnp.shape(out)}, dtype {jnp.result_type(out)}"
            raise ValueError(f"example_loss(θ, x) returned {got}: must be a float scalar")
        return out

    def __call__(self, theta: ThetaLike, data: Measure) -> Float[Array, ""]:
        """Σ_i w_i ℓ(θ, x_i), by the measure's own ``expectation``."""
        return data.expectation(lambda x: self.at(theta, x))


class ExampleProblem(FunctionProblem):
    """A Problem made by ``Problem.from_examples``: L(θ) = Σ_i w_i ℓ(θ, x_i) over its measure of examples
    ``data``, which ``examples()`` returns; ℓ is static (compiled once), the measure's numbers are leaves."""

    loss_fn: ExpectedLoss = eqx.field(static=True)
    data: Measure

    def examples(self) -> Measure:
        """The measure of examples given to ``from_examples``."""
        return self.data

    def example_loss(self, theta: ThetaLike, x: PyTree) -> Float[Array, ""]:
        """ℓ(θ, x), the ``example_loss`` given to ``from_examples``."""
        return self.loss_fn.at(theta, x)


def check_problem(prob: Problem) -> Problem:
    """Check the contract where a problem enters the engine (docs/problem.md): θ a pytree of float arrays, the
    loss a float scalar, each attractor residual a float scalar. Shapes only (``jax.eval_shape``): no compute. On a
    CPU whose jaxlib can miscompile and is not guarded, warns once (``popdyn._xla.warn_unguarded``)."""
    warn_unguarded()
    if not isinstance(prob, Problem):
        raise ValueError(
            f"prob={prob!r} is invalid: must be a popdyn.Problem (a plain loss function becomes one "
            "with popdyn.Problem.from_loss(loss, init))"
        )
    try:
        template = prob.template()
    except Exception as err:  # the user's init is run here first: say so
        raise ValueError(f"prob.init(key) failed while tracing: {type(err).__name__}: {err}") from err
    leaves = jax.tree_util.tree_flatten_with_path(template)[0]
    if not leaves:
        raise ValueError("prob.init(key) returned no arrays: θ must be a pytree of float arrays")
    for path, leaf in leaves:
        if not jnp.issubdtype(getattr(leaf, "dtype", np.dtype(object)), jnp.floating):
            raise ValueError(
                f"θ{jax.tree_util.keystr(path)} has dtype {getattr(leaf, 'dtype', type(leaf))}: every "
                "leaf of θ must be a float array"
            )
    _check_scalar("prob.loss(θ)", prob.loss, template)
    for name, fn in prob.attractors().items():
        _check_scalar(f"attractor residual {name!r}", fn, template)
    return prob


def _check_scalar(what: str, fn: Callable, template: PyTree[jax.ShapeDtypeStruct]) -> None:
    out = jax.eval_shape(fn, template)
    if not (hasattr(out, "shape") and out.shape == () and jnp.issubdtype(out.dtype, jnp.floating)):
        got = f"shape {out.shape}, dtype {out.dtype}" if hasattr(out, "shape") else type(out).__name__
        raise ValueError(
            f"{what} returned {got}: must be a float scalar (a residual is a float >= 0 that vanishes "
            "on the attractor, never a boolean)"
        )
