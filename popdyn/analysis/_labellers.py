"""Labellers: which attractor each run ended at, as small objects (docs/basins.md, "Labels").

A labeller is called on the end points of a run that are still to be named, ``labeller(prob, traj, todo)``, and
returns ``Labels``: an integer per point (−1 where it names none) and the names those integers index. Labellers
compose: ``FirstOf(a, b)`` lets ``b`` name what ``a`` left, which is how the default works — the problem's own
residuals (``Residuals``), then the loss level and Morse index of the end point (``LossLevels``). ``Clusters`` groups
positions or a user's features, ``Reached`` names the runs that met a dynamics' target, ``Rest`` gives one name to
whatever is left. A new way of naming attractors is one subclass of ``AbstractLabeller``.

Every labeller labels only points whose status is in its ``statuses`` (by default the resolved ones: converged,
converged late, at a saddle, degenerate); the others stay unresolved (−1), counted and reported, never dropped.
"""

from __future__ import annotations

import abc
import warnings
from collections.abc import Callable
from typing import ClassVar, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from popdyn import _validate
from popdyn._batching import as_batch
from popdyn.analysis._cluster import cluster_points
from popdyn.analysis._levels import level_groups, resolution, shown_level
from popdyn.curvature import EXACT_MAX_DIM, extreme_eigenvalues, hessian_spectrum, spectra_and_decrements
from popdyn.dynamics import Status, Trajectory
from popdyn.dynamics._status import RESOLVED, negative
from popdyn.problem import Problem, Theta, ThetaLike


class Labels(NamedTuple):
    """Per point, the index of its attractor in ``names`` (−1: none); unpacks as ``labels, names = …``."""

    labels: np.ndarray
    names: tuple[str, ...]


class AbstractLabeller(eqx.Module):
    """Names the attractors end points reached.

    Subclasses implement ``label(prob, traj, todo) → Labels``: for the points marked in ``todo`` (a boolean array,
    one entry per run of ``traj``), an index into the returned names, and −1 for the points it does not name (and
    everywhere outside ``todo``). ``statuses`` lists the status codes of the points it may be given (default: the
    resolved ones, ``popdyn.dynamics._status.RESOLVED``). Call the object, not ``label``: the call restricts
    ``todo`` to those statuses.
    """

    statuses: ClassVar[tuple[int, ...]] = tuple(int(s) for s in RESOLVED)

    @abc.abstractmethod
    def label(self, prob: Problem, traj: Trajectory, todo: np.ndarray) -> Labels:
        """Labels for the points of ``todo`` (see the class docstring).

        **Arguments:** ``prob`` the problem that ran; ``traj`` its batched run; ``todo`` which runs to name."""

    def __call__(self, prob: Problem, traj: Trajectory, todo: np.ndarray | None = None) -> Labels:
        """``label`` on the points of ``todo`` (default: all) whose status is in ``statuses``."""
        status = np.asarray(traj.status)
        mask = np.isin(status, self.statuses)
        if todo is not None:
            mask = mask & np.asarray(todo, bool)
        return self.label(prob, traj, mask)


class FirstOf(AbstractLabeller):
    """Each labeller in turn names what the ones before it left: the names are theirs, in order, and a point's
    label is the first one it gets.

    **Arguments:** ``*labellers``: the labellers (``AbstractLabeller``), in order of precedence."""

    labellers: tuple[AbstractLabeller, ...]

    def __init__(self, *labellers: AbstractLabeller):
        if not labellers or not all(isinstance(x, AbstractLabeller) for x in labellers):
            raise ValueError(f"labellers={labellers!r} is invalid: give one or more popdyn.analysis labellers")
        self.labellers = tuple(labellers)

    @property
    def statuses(self) -> tuple[int, ...]:  # type: ignore[override]  # the union of its parts' statuses
        return tuple(sorted({s for x in self.labellers for s in x.statuses}))

    def label(self, prob: Problem, traj: Trajectory, todo: np.ndarray) -> Labels:
        labels = np.full(todo.shape, -1)
        names: tuple[str, ...] = ()
        for part in self.labellers:
            left = todo & (labels < 0)
            extra, extra_names = part(prob, traj, left)
            labels = np.where(left & (extra >= 0), extra + len(names), labels)
            names = names + tuple(extra_names)
        return Labels(labels, names)


class Residuals(AbstractLabeller):
    """The problem's own attractors (``Problem.attractors``): a point gets the attractor of smallest residual, if
    that residual is below ``tol``. The names are every attractor of the problem, reached or not.

    **Arguments:** ``tol``: the residual below which a point is at an attractor (> 0; default 1e-3)."""

    tol: float = 1e-3

    def __check_init__(self) -> None:
        _validate.positive("tol", self.tol)

    def label(self, prob: Problem, traj: Trajectory, todo: np.ndarray) -> Labels:
        names = tuple(prob.attractors())
        if not names:
            return Labels(np.full(todo.shape, -1), names)
        R = np.asarray(_attractor_residuals(prob, traj.final))
        bad = np.isfinite(R) & (R < 0)
        if bad.any():
            i, j = np.argwhere(bad)[0]
            raise ValueError(
                f"attractor residual {names[j]!r} returned {R[i, j]!r} at an end point: residuals must be "
                "floats >= 0 that vanish on the attractor"
            )
        R = np.where(np.isfinite(R), R, np.inf)
        within = todo[:, None] & (R < self.tol)
        both = within.sum(axis=-1) > 1
        if both.any():
            pair = [names[j] for j in np.flatnonzero(within[np.argmax(both)])[:2]]
            warnings.warn(
                f"{int(both.sum())} end point(s) lie within tol={self.tol:g} of two attractors ({pair[0]!r} and "
                f"{pair[1]!r} at the first): their residuals overlap there, so the label is ambiguous; each is given "
                "the attractor of the smaller residual (on a tie, the first listed). Make the residuals vanish on "
                "disjoint sets",
                stacklevel=2,
            )
        best = np.argmin(R, axis=-1)
        hit = np.take_along_axis(R, best[:, None], axis=-1)[:, 0] < self.tol
        return Labels(np.where(todo & hit, best, -1), names)


@eqx.filter_jit
def _attractor_residuals(prob: Problem, final) -> jax.Array:
    """(B, n_attractors) residuals, compiled once per problem (not once per call)."""
    return jnp.stack([jax.vmap(fn)(final) for fn in prob.attractors().values()], axis=-1)


MORSE_TOL = 1e-7
"""The saddle test's relative threshold when a labeller counts negative eigenvalues (the dynamics' default)."""


def morse_index(prob: Problem, theta: ThetaLike, saddle_tol: float = MORSE_TOL) -> np.ndarray:
    """Number of Hessian eigenvalues below −saddle_tol·ρ, ρ = max(|λ_min|, |λ_max|) (the saddle test of
    ``popdyn.dynamics._status.negative``), at each point of a batch (exact spectrum up to ``EXACT_MAX_DIM``
    parameters; above, 0 or 1 from Lanczos λ_min).

    **Arguments:** ``prob`` the problem; ``theta`` a batch of points; ``saddle_tol`` the relative threshold."""
    batch, _ = as_batch(prob, theta)
    return _index(prob, batch, np.asarray(hessian_spectrum(prob, batch)) if _exact(prob) else None, saddle_tol)


def _exact(prob: Problem) -> bool:
    return prob.n_params() <= EXACT_MAX_DIM


def _index(prob: Problem, batch: ThetaLike, spectra: np.ndarray | None, saddle_tol: float) -> np.ndarray:
    """``morse_index`` from the exact ``spectra`` of ``batch``, or (None) from Lanczos extremes."""
    if spectra is not None:
        return np.sum(np.asarray(negative(spectra, spectra[:, :1], spectra[:, -1:], saddle_tol)), axis=-1)
    lo, hi = (np.asarray(v) for v in extreme_eigenvalues(prob, batch))
    return np.asarray(negative(lo, lo, hi, saddle_tol)).astype(int)


def loss_scale(traj: Trajectory) -> float:
    """S = max |L(θ0)| over the run's starts (its first record), the scale that sets the resolution of loss levels."""
    start_loss = np.abs(np.asarray(traj.loss)[..., 0])
    return float(np.max(start_loss, initial=0.0, where=np.isfinite(start_loss)))


class LossLevels(AbstractLabeller):
    """By kind and loss level: "min L=…", "saddle(k) L=…" (k the Morse index; "saddle(0)" for a saddle found by the
    higher-order probe), "degenerate L=…" (status DEGENERATE, never a minimum). Each end point's loss is read at its
    own precision (``popdyn.analysis._levels.resolution``): its Newton decrement δL (the spread of L its stopping
    leaves), never finer than L's round-off on the starts' loss scale S (``loss_scale``) nor coarser than
    LEVEL_TOL·max(S, |L|). Sorted levels closer than the larger resolution of two neighbours, or than
    LEVEL_TOL·|L|, are one, so nothing changes when L is scaled; a name shows the median level to 6 significant
    digits, or 0 within the level's resolution: a manifold of minima is one attractor however it is spread in θ, a
    minimum reached at round-off keeps one name, and minima far below the starts' scale stay apart."""

    def label(self, prob: Problem, traj: Trajectory, todo: np.ndarray) -> Labels:
        labels = np.full(len(todo), -1)
        idx = np.flatnonzero(todo)
        if idx.size == 0:
            return Labels(labels, ())
        scale = loss_scale(traj)
        sub = jax.tree_util.tree_map(lambda x: np.asarray(x)[idx], traj.final)  # on the host: no gather program
        loss = np.asarray(traj.final_loss)[idx]
        spectra, decrement = spectra_and_decrements(prob, sub)
        index = _index(prob, sub, None if spectra is None else np.asarray(spectra), MORSE_TOL)
        res = resolution(loss, np.asarray(decrement), scale)
        codes = np.asarray(traj.status)[idx]
        kind = np.where(codes == Status.DEGENERATE, 2, np.where((index == 0) & (codes == Status.SADDLE), 1, 0))
        names: list[str] = []
        for k, sub_kind in sorted(set(zip(index.tolist(), kind.tolist(), strict=True))):
            sel = np.flatnonzero((index == k) & (kind == sub_kind))
            ranked, group = level_groups(loss[sel], res[sel])
            order = sel[ranked]
            prefix = ("min" if k == 0 else f"saddle({k})", "saddle(0)", "degenerate")[sub_kind]
            for g in range(group[-1] + 1):
                members = order[group == g]
                labels[idx[members]] = len(names)
                level = shown_level(float(np.median(loss[members])), float(np.max(res[members])))
                names.append(f"{prefix} L={level:.6g}")
        return Labels(labels, tuple(names))


class Clusters(AbstractLabeller):
    """Clusters of the end points' positions, or of features of them, at ``radius`` (``cluster_points``: single
    linkage over cells of that side), minima, saddles and degenerate points apart: "min0", "min1", …, "saddle0",
    "degenerate0" (0 the largest cluster of its kind).

    **Arguments:**

    - ``features``: θ → feature vector (e.g. ``jnp.sign``), or None for the position θ itself.
    - ``radius``: the clustering scale (> 0; default 1e-2)."""

    features: Callable[[Theta], jax.Array] | None = None
    radius: float = 1e-2

    def __check_init__(self) -> None:
        _validate.positive("cluster_radius", self.radius)
        if self.features is not None and not callable(self.features):
            raise ValueError(f"features={self.features!r} is invalid: must be a function θ -> features, or None")

    def label(self, prob: Problem, traj: Trajectory, todo: np.ndarray) -> Labels:
        if not todo.any():
            return Labels(np.full(todo.shape, -1), ())
        fn = (lambda t: ravel_pytree(t)[0]) if self.features is None else self.features
        points = np.asarray(jax.vmap(lambda t: jnp.atleast_1d(jnp.ravel(fn(t))))(traj.final))
        status = np.asarray(traj.status)
        labels = np.full(len(status), -1)
        names: list[str] = []
        kinds = (
            ((Status.CONVERGED, Status.CONVERGED_LATE), "min"),
            ((Status.SADDLE,), "saddle"),
            ((Status.DEGENERATE,), "degenerate"),
        )
        for codes, kind in kinds:
            idx = np.flatnonzero(todo & np.isin(status, codes))
            if idx.size == 0:
                continue
            ids = cluster_points(points[idx], self.radius)
            for k in range(ids.max() + 1):
                labels[idx[ids == k]] = len(names)
                names.append(f"{kind}{k}")
        return Labels(labels, tuple(names))


class Rest(AbstractLabeller):
    """Every point it is given, under one name: last in a ``FirstOf``, "whatever else became steady".

    **Arguments:** ``name``: the name (default "other")."""

    name: str = "other"

    def label(self, prob: Problem, traj: Trajectory, todo: np.ndarray) -> Labels:
        return Labels(np.where(todo, 0, -1), (self.name,))


class Reached(Rest):
    """The runs that met their dynamics' target (status REACHED: ``GradientFlow(target=…)``,
    ``GradientDescent(target=…)``), under one name: ``Rest`` given those runs only.

    **Arguments:** ``name``: the attractor's name (default "target")."""

    name: str = "target"
    statuses: ClassVar[tuple[int, ...]] = (int(Status.REACHED),)


def default_labeller(
    tol: float = 1e-3, use_theory: bool = True, features: str | Callable = "level", cluster_radius: float = 1e-2
) -> AbstractLabeller:
    """The labeller the keyword settings of ``basin_fractions`` name: ``Residuals(tol)`` first (with
    ``use_theory``), then ``LossLevels()`` (``features="level"``) or ``Clusters`` of positions (``"position"``) or
    of a function θ → features, at ``cluster_radius``.

    **Arguments:** as ``basin_fractions``."""
    if features == "level":
        _validate.positive("cluster_radius", cluster_radius)
        rest: AbstractLabeller = LossLevels()
    elif features == "position":
        rest = Clusters(radius=cluster_radius)
    elif callable(features):
        rest = Clusters(features=features, radius=cluster_radius)
    else:
        raise ValueError(f"features={features!r} is invalid: must be 'level', 'position' or a function θ -> features")
    return FirstOf(Residuals(tol), rest) if use_theory else FirstOf(rest)
