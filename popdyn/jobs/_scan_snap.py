"""Scan and Snap command-line jobs (docs/models/scan_snap.md; docs/jobs.md): the transition time t₀ of the exact joint
dynamics against its closed form, λ_max along exact GD against 1/η and 2/η, and which distinct token wins the
scan from a 2-D slice of initial (Y, Z) values.

Data (all three jobs): K classes sharing one query token, the setting of Theorems 2(b) and 4, with the authors'
``Dataset2`` weights (each common token weight 1, the class's distinct tokens linspace(0.1, 1), normalised) and the
vocabulary padded with unused tokens up to M; every output softmax runs over all M tokens (§1-§2). θ(0) = 0
unless a grid sets a coordinate. The loss is the exact T → ∞ population cross-entropy (``ScanSnap(T=None)``).
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import Any, NamedTuple, cast

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float
from matplotlib.figure import Figure

from popdyn import _validate
from popdyn.analysis import BasinMap, Grid, StepSizeAudit, basin_map, hitting_times, step_size_audit
from popdyn.dynamics import STATUS_NAMES, Trajectory, gradient_descent
from popdyn.io import Result
from popdyn.jobs._basin_result import basin_result
from popdyn.jobs._registry import DECLARED, registered
from popdyn.plot import plot_step_size_audit
from popdyn.problem import Theta
from popdyn.tasks.scan_snap import (
    Classes,
    ScanSnap,
    dataset2,
    h_star,
    make_classes,
    omega_1,
    scan_time,
    token_winner,
    transition_time,
    x_star,
)
from popdyn.tasks.scan_snap._data import distinct_mask

WORKED_CASE = {"K": 10, "M": 1000, "eta_y": 0.5}
"""The worked case for t₀ of §5 (Theorem 4): K = 10, M = 1000, η_Y = 0.5."""


# ---- data and validation --------------------------------------------------------------------------------------------
def _min_vocabulary(K: int, n_common: int, n_distinct: int) -> int:
    return n_common + K * n_distinct + 1 + K  # [common | distinct per class | the query | the K next tokens]


def _check_data(
    K, n_common, n_distinct, M, *, min_M: int = 2, M_optional: bool = True
) -> tuple[int, int, int, int | None]:
    """Validated (K, n_common, n_distinct, M); M (None allowed when ``M_optional``) must hold every token used."""
    K = _validate.int_at_least("K", K, 1)
    n_common = _validate.int_at_least("n_common", n_common, 0)
    n_distinct = _validate.int_at_least("n_distinct", n_distinct, 1)
    if M is not None or not M_optional:
        M = _validate.int_at_least("M", M, max(min_M, _min_vocabulary(K, n_common, n_distinct)))
    return K, n_common, n_distinct, M


def shared_query_classes(K: int, n_common: int, n_distinct: int, M: int | None = None) -> Classes:
    """K classes sharing one query token: ``dataset2(1, K, n_common=n_common, n_distinct=n_distinct)`` (the
    authors' layout and weights, §7), its vocabulary padded with unused tokens up to ``M`` (None: no padding)."""
    c = dataset2(1, K, n_common=n_common, n_distinct=n_distinct)
    if M is None or M == c.M:
        return c
    return make_classes(np.pad(c.probs, ((0, 0), (0, M - c.M))), c.query, c.label)


def _overlap(prob: ScanSnap) -> float:
    """ρ₀ = max_{n≠n'} f_nᵀf_n' at Z = 0 (0 for one class)."""
    f = np.asarray(prob.features(prob.init(None)))
    G = f @ f.T
    return float(np.max(G[~np.eye(len(G), dtype=bool)])) if len(G) > 1 else 0.0


# ---- converge: the transition time t₀ -------------------------------------------------------------------------------
def decoder_log_odds(prob: ScanSnap, theta: Theta) -> Float[Array, ""]:
    """x̄(θ) = Σ_n π_n [w_nn − logsumexp_{j≠n} w_nj + ln(M−1)] with w_n = Yᵀf_n (logits of class n, indexed by its
    next token). Along the closed-form decoder w_n = (M−1)h(t/K)ζ_n (Lemmas 5-6) it equals M h(t/K) exactly."""
    w = prob.features(theta) @ theta["Y"]
    label = jax.nn.one_hot(prob.label, prob.M, dtype=bool)
    own = jnp.sum(jnp.where(label, w, 0.0), axis=-1)
    rest = jax.nn.logsumexp(jnp.where(label, -jnp.inf, w), axis=-1)
    return jnp.dot(prob.weights, own - rest) + jnp.log(prob.M - 1.0)


class _LogOddsReach(eqx.Module):
    """Target ``level − x̄(θ)``: reached when the decoder's label log-odds first reach ``level`` (array leaves, so
    a new problem of the same shapes reuses the compiled solver)."""

    prob: ScanSnap
    level: Float[Array, ""]

    def __call__(self, theta: Theta) -> Float[Array, ""]:
        return self.level - decoder_log_odds(self.prob, theta)


class _BlockRates(eqx.Module):
    """P(∇L) = (η_Y ∇_Y L, η_Z ∇_Z L): the per-block rates of ``time_scales`` as a preconditioner whose rates are
    array leaves, so that every η_Y/η_Z ratio reuses one compiled solver (``time_scales`` are static)."""

    eta_y: Float[Array, ""]
    eta_z: Float[Array, ""]

    def __call__(self, grad: Theta) -> Theta:
        return {"Y": self.eta_y * grad["Y"], "Z": self.eta_z * grad["Z"]}


def _block_rates(eta_y: float, eta_z: float) -> _BlockRates:
    """The preconditioner of the rates (η_Y, η_Z) = (``eta_y``, ``eta_z``) (``_BlockRates``)."""
    return _BlockRates(jnp.asarray(eta_y), jnp.asarray(eta_z))


def _positive_numbers(name: str, values: Sequence[float], what: str) -> list[float]:
    """``values`` as a list of numbers > 0; ValueError unless it is a non-empty sequence of them.

    **Arguments:** ``name`` the argument's name in messages; ``values`` the sequence; ``what`` what its entries
    are, in the message ("numbers", "learning rates")."""
    if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__") or len(values) == 0:
        raise ValueError(f"{name}={values!r} is invalid: must be a non-empty sequence of {what} > 0")
    return [_validate.positive(name, v) for v in values]


class _SnapClosedForm(NamedTuple):
    """The closed forms of §4-§5 that the measured transition time is held against (``_snap_closed_form``).

    **Fields:** ``x_star`` x* = (1+ω₁) ln M, the larger root of e^x = (M−1)x (Lemma 8); ``omega_1`` ω₁; ``t0``
    t₀ = K(2(M−1)x* − 1)/(Mη_Y), where M h(t/K) = x* (Lemma 6); ``t0_sharp`` 2(1+ω₁)K ln M/η_Y; ``t0_leading``
    2K ln M/η_Y; ``t0_scan_end`` t'₀ = K ln M/η_Y, the end of the scan; ``rho0`` the overlap ρ₀ of the class
    features at Z = 0; ``t0_remark1`` t₀/(1−ρ₀), Remark 1's slower rate (1−ρ₀)η_Y."""

    x_star: float
    omega_1: float
    t0: float
    t0_sharp: float
    t0_leading: float
    t0_scan_end: float
    rho0: float
    t0_remark1: float


def _snap_closed_form(prob: ScanSnap, K: int, M: int, eta_y: float) -> _SnapClosedForm:
    """The closed forms of the transition time for ``prob`` (``_SnapClosedForm``).

    **Arguments:** ``prob`` the K classes; ``K``, ``M`` classes and vocabulary size; ``eta_y`` the decoder rate."""
    xs = float(x_star(M))
    t0 = K * (2 * (M - 1) * xs - 1) / (M * eta_y)  # Lemma 6 at M h = x*
    rho0 = _overlap(prob)
    return _SnapClosedForm(
        x_star=xs,
        omega_1=float(omega_1(M)),
        t0=t0,
        t0_sharp=float(transition_time(K, M, eta_y, sharp=True)),
        t0_leading=float(transition_time(K, M, eta_y)),
        t0_scan_end=float(scan_time(K, M, eta_y)),
        rho0=rho0,
        t0_remark1=t0 / (1 - rho0),  # Remark 1: effective rate (1 − ρ₀)η_Y
    )


class _SnapTime(NamedTuple):
    """The measured transition time at one rate ratio (``_snap_times``).

    **Fields:** ``ratio`` ν = η_Y/η_Z; ``eta_z`` η_Z; ``t0_measured`` the first time x̄(θ_t) = x* (not finite:
    not reached); ``measured_over_t0`` its ratio to the closed-form t₀; ``status`` the run's end status;
    ``common_logit_change`` how far the query's attention logits on the common tokens moved from Z = 0 by then, on
    average (None: no common token); ``top_distinct_logit_change`` the same on each class's most frequent distinct
    token."""

    ratio: float
    eta_z: float
    t0_measured: float
    measured_over_t0: float
    status: str
    common_logit_change: float | None
    top_distinct_logit_change: float


def _snap_times(
    prob: ScanSnap, closed: _SnapClosedForm, eta_y: float, ratios: list[float], rtol: float
) -> list[_SnapTime]:
    """The transition time of the exact joint flow from θ = 0 for each ν in ``ratios`` (ascending): the exact
    hitting time of x̄(θ_t) = x* at η_Z = η_Y/ν, horizon 4t₀/(1−ρ₀), and the attention moved by then.

    **Arguments:** ``prob`` the classes; ``closed`` their closed forms; ``eta_y`` η_Y; ``ratios`` the values of
    η_Y/η_Z; ``rtol`` the flow's relative tolerance (atol = rtol/100)."""
    theta0 = prob.init(None)
    target = _LogOddsReach(prob, jnp.asarray(closed.x_star))
    m = int(prob.query[0])  # the shared query
    common = np.flatnonzero((np.asarray(prob.probs) > 0).sum(axis=0) > 1)
    top = _top_distinct(prob)
    rows = []
    for nu in sorted(ratios):
        ht = hitting_times(
            prob,
            theta0,
            target,
            "flow",
            t1=4 * closed.t0_remark1,
            precondition=_block_rates(eta_y, eta_y / nu),
            rtol=rtol,
            atol=rtol / 100,
        )
        Z = np.asarray(ht.final["Z"])
        t = float(ht.times)
        rows.append(
            _SnapTime(
                ratio=nu,
                eta_z=eta_y / nu,
                t0_measured=t,
                measured_over_t0=t / closed.t0,
                status=STATUS_NAMES[int(ht.status)],
                common_logit_change=float(np.mean(Z[m, common])) if common.size else None,
                top_distinct_logit_change=float(np.mean(Z[m, top])),
            )
        )
    return rows


def _converge_checks(rows: list[_SnapTime], closed: _SnapClosedForm, rtol: float) -> dict[str, bool]:
    """The direction Remark 1 suggests, each check by name: every run reached x*; t₀ ≤ measured ≤ t₀/(1−ρ₀) and
    measured later for larger η_Y/η_Z, among the runs that reached it, up to 100·rtol·t₀.

    **Arguments:** ``rows`` the measured times, ν ascending; ``closed`` the closed forms; ``rtol`` the flow's
    tolerance."""
    done = [r for r in rows if math.isfinite(r.t0_measured)]
    tol = 100 * rtol * closed.t0
    return {
        "all_reached": len(done) == len(rows),
        "closed_form_is_lower_bound": all(r.t0_measured >= closed.t0 - tol for r in done),
        "remark1_is_upper_bound": all(r.t0_measured <= closed.t0_remark1 + tol for r in done),
        "later_for_larger_ratio": all(
            a.t0_measured <= b.t0_measured + tol for a, b in zip(done, done[1:], strict=False)
        ),
    }


def _converge_table(closed: _SnapClosedForm, rows: list[_SnapTime], checks: dict[str, bool]) -> list[str]:
    """The printed closed forms, one line per measured ratio and the verdicts of ``_converge_checks``.

    **Arguments:** ``closed`` the closed forms; ``rows`` the measured times; ``checks`` their checks."""
    lines = [
        f"  closed form: x* = {closed.x_star:.6f} (ω₁ = {closed.omega_1:.4f}); t₀ = K(2(M−1)x*−1)/(Mη_Y) = "
        f"{closed.t0:.4f}, 2(1+ω₁)K ln M/η_Y = {closed.t0_sharp:.4f}, 2K ln M/η_Y = "
        f"{closed.t0_leading:.4f}, t'₀ = K ln M/η_Y = {closed.t0_scan_end:.4f}; "
        f"Remark 1 t₀/(1−ρ₀) = {closed.t0_remark1:.4f}",
        f"  {'η_Y/η_Z':>9s} {'η_Z':>9s} {'t₀ measured':>12s} {'/ t₀':>9s} {'Δz common':>10s} {'Δz top':>9s}  status",
    ]
    for r in rows:
        dzc = "n/a" if r.common_logit_change is None else f"{r.common_logit_change:+.5f}"
        lines.append(
            f"  {r.ratio:9.4g} {r.eta_z:9.4g} {r.t0_measured:12.4f} "
            f"{r.measured_over_t0:9.6f} {dzc:>10s} {r.top_distinct_logit_change:+9.5f}  "
            f"{r.status}"
        )
    verdicts = ("closed_form_is_lower_bound", "remark1_is_upper_bound", "later_for_larger_ratio")
    lines.append(
        "  direction: t₀ ≤ measured {} ; measured ≤ t₀/(1−ρ₀) {} ; later for larger η_Y/η_Z {}".format(
            *("holds" if checks[k] else "FAILS" for k in verdicts)
        )
    )
    return lines


@registered
def converge_scan_snap(
    K: int = DECLARED,
    M: int = DECLARED,
    eta_y: float = DECLARED,
    ratios: Sequence[float] = DECLARED,
    n_common: int = DECLARED,
    n_distinct: int = DECLARED,
    rtol: float = DECLARED,
) -> Result:
    """Transition time t₀ (the snap) of the exact joint gradient flow from θ = 0, at η_Y = ``eta_y`` and
    η_Z = η_Y/ν for each ν in ``ratios``, against the closed forms of §4-§5 (docs/jobs.md).

    t₀ is where the decoder leaves its linear stage: M h(t/K) reaches x* = (1+ω₁) ln M, the larger root of
    e^x = (M−1)x (Lemma 8); by Lemma 6 that is t₀ = K(2(M−1)x* − 1)/(Mη_Y) = 2(1+ω₁)K ln M/η_Y · (1 − O(1/M)).
    [our choice] Measured as the exact hitting time (root finding on the solver's dense output, ``until=``) of
    x̄(θ_t) = x*, with x̄ the decoder's label log-odds (``decoder_log_odds``, = M h(t/K) along the closed form).
    The closed form treats the class features as orthogonal and frozen; common tokens give them an overlap
    ρ₀ = f_nᵀf_n' > 0, which Remark 1 turns into a slower rate (1−ρ₀)η_Y, and attention only lowers ρ (common
    logits fall, Theorem 2(b)). The direction Remark 1 suggests, and the job checks, is t₀ ≤ measured ≤
    t₀/(1−ρ₀), measured falling towards t₀ as η_Z grows (smaller ν; attention de-overlaps the classes before the
    snap); with n_common = 0 the features are orthogonal, Z never moves and measured = t₀ for every ν.

    The worked case of §5 is K = 10, M = 1000, η_Y = 0.5 (``M=1000``; about 30 s on 2 cores, each flow step
    moving 2M² numbers); the default M = 200 keeps the job fast (the compiled solver is shared by all ratios).

    **Arguments:** ``K`` classes; ``M`` vocabulary size (≥ the tokens the classes use); ``eta_y`` decoder rate
    η_Y; ``ratios`` values of η_Y/η_Z; ``n_common``, ``n_distinct`` common tokens and distinct tokens per class;
    ``rtol`` the flow's relative tolerance (atol = rtol/100; hitting times are as accurate as the trajectory).
    """
    # min_M=4 as x* needs M−1 > e; cast: with M_optional=False the M returned is an int, never None
    K, n_common, n_distinct, M = cast(
        tuple[int, int, int, int], _check_data(K, n_common, n_distinct, M, min_M=4, M_optional=False)
    )
    eta_y = _validate.positive("eta_y", eta_y)
    ratios = _positive_numbers("ratios", ratios, "numbers")
    rtol = _validate.positive("rtol", rtol)
    if rtol >= 1e-3:
        raise ValueError(f"rtol={rtol!r} is out of range: must lie in (0, 1e-3)")

    prob = ScanSnap(shared_query_classes(K, n_common, n_distinct, M))
    closed = _snap_closed_form(prob, K, M, eta_y)
    rows = _snap_times(prob, closed, eta_y, ratios, rtol)
    checks = _converge_checks(rows, closed, rtol)
    worked = {"K": K, "M": M, "eta_y": eta_y} == WORKED_CASE
    inputs = {
        "task": "scan-snap",
        "K": K,
        "M": M,
        "eta_y": eta_y,
        "ratios": ratios,
        "n_common": n_common,
        "n_distinct": n_distinct,
        "rtol": rtol,
        "init": "Y = Z = 0",
        "T": None,
        "worked_case": worked,
        "measured": "first time the decoder label log-odds reach x* (exact hitting time of the joint flow)",
    }
    results = {"closed_form": closed._asdict(), "rows": [r._asdict() for r in rows], "checks": checks}
    closed_times = [closed.t0, closed.t0_sharp, closed.t0_leading, closed.t0_remark1]
    measured = {"ratio": np.array([r.ratio for r in rows]), "t0_measured": np.array([r.t0_measured for r in rows])}
    arrays = {"converge": measured | {"closed_form": np.array(closed_times)}}
    res = Result(inputs, results, arrays=arrays, figures={"converge": _converge_figure(rows, closed, K, M, eta_y)})
    res.lines.append(
        f"converge scan-snap  K={K}, M={M}, η_Y={eta_y:g}, {n_common} common + {n_distinct} distinct "
        f"tokens per class (ρ₀ = {closed.rho0:.4f}), θ(0) = 0" + ("  [the paper's worked case]" if worked else "")
    )
    res.lines += _converge_table(closed, rows, checks)
    return res


def _top_distinct(prob: ScanSnap) -> np.ndarray:
    """Each class's most frequent distinct token (Theorem 3's dominant token from Z(0) = 0)."""
    P = np.asarray(prob.probs)
    return np.argmax(np.where(distinct_mask(P), P, -1.0), axis=1)


def _converge_figure(rows: list[_SnapTime], closed: _SnapClosedForm, K: int, M: int, eta_y: float) -> Figure:
    """The measured transition time against ν = η_Y/η_Z with the closed forms as lines, and the attention logits
    moved by then (common tokens, top distinct token).

    **Arguments:** ``rows`` the measured times; ``closed`` the closed forms; ``K``, ``M``, ``eta_y`` the
    settings, for the title."""
    fig = Figure(figsize=(11, 4.2), layout="constrained")
    ax, ax_z = fig.subplots(1, 2)
    nu = np.array([r.ratio for r in rows])
    ax.plot(nu, [r.t0_measured for r in rows], "o-", color="k", label="measured (exact flow, hitting time)")
    for value, label, style in (
        (closed.t0, "t₀ = K(2(M−1)x*−1)/(Mη_Y)", "-"),
        (closed.t0_sharp, "2(1+ω₁)K ln M/η_Y", "--"),
        (closed.t0_remark1, f"t₀/(1−ρ₀), ρ₀ = {closed.rho0:.3f} (Remark 1)", ":"),
        (closed.t0_leading, "2K ln M/η_Y", "-."),
    ):
        ax.axhline(value, ls=style, lw=1, label=label)
    ax.set(
        xscale="log",
        xlabel="η_Y/η_Z",
        ylabel="transition time t₀",
        title=f"snap time, K = {K}, M = {M}, η_Y = {eta_y:g}",
    )
    ax.legend(fontsize=7)
    if rows[0].common_logit_change is not None:
        ax_z.plot(nu, [-cast(float, r.common_logit_change) for r in rows], "o-", label="−Δz, common tokens")
    ax_z.plot(nu, [r.top_distinct_logit_change for r in rows], "s-", label="Δz, top distinct token")
    ax_z.set(
        xscale="log",
        xlabel="η_Y/η_Z",
        ylabel="attention logit moved by t₀",
        title="attention at the snap (smaller for larger η_Y/η_Z)",
    )
    ax_z.legend(fontsize=7)
    return fig


# ---- stepsize: λ_max along exact GD ---------------------------------------------------------------------------------
class HessianAtZero(NamedTuple):
    """What §5 gives for λ_max(∇²L) at θ = 0 (``hessian_at_zero``).

    **Fields:** ``lambda_Y_block`` λ_max(Σ_n π_n f_n f_nᵀ)/M, the top eigenvalue of the Y–Y block and so a lower
    bound on λ_max(∇²L(0)); ``lambda_max`` λ_max(∇²L(0)) exactly, max_n π_n max(1/M, √(1 − 1/M) σ_max(J_n)), when
    the classes' supports are disjoint (None when they overlap)."""

    lambda_Y_block: float
    lambda_max: float | None


def hessian_at_zero(classes: Classes) -> HessianAtZero:
    """Closed forms for ∇²L at θ = 0 (§5, "Step size"), f_n = P(·|n)/‖P(·|n)‖, π_n the class weights.

    * [§5] The Y–Y block is Σ_n π_n (f_n f_nᵀ) ⊗ (I − 11ᵀ/M)/M, so λ_max(∇²L(0)) ≥ λ_max(Σ_n π_n f_n f_nᵀ)/M
      (a principal block; Cauchy interlacing): ``lambda_Y_block``.
    * [derived] The Z–Z block is 0 and the Y–Z block sends δz_{ψ(n)} to Σ_n π_n J_n δz u_nᵀ, with
      J_n = (I − f_n f_nᵀ) diag(f_n) and u_n = 1/M − e_n (‖u_n‖² = 1 − 1/M). When the supports are disjoint
      (no common token) these pieces are mutually orthogonal and orthogonal to the Y–Y block's range, so the
      spectrum is {π_n/M} ∪ {±π_n ‖u_n‖ σ_k(J_n)} ∪ {0} and λ_max = max_n π_n max(1/M, √(1 − 1/M) σ_max(J_n)):
      ``lambda_max`` (None when supports overlap).

    **Arguments:** ``classes`` the data (``Classes``)."""
    P, w, M = classes.probs, classes.weights, classes.M
    F = P / np.linalg.norm(P, axis=1, keepdims=True)
    y_block = float(np.linalg.eigvalsh(F.T @ (w[:, None] * F))[-1] / M)
    if classes.common().any():
        return HessianAtZero(y_block, None)
    sig = [np.linalg.svd((np.eye(M) - np.outer(f, f)) * f[None, :], compute_uv=False)[0] for f in F]
    return HessianAtZero(
        y_block, float(max(wn * max(1 / M, math.sqrt(1 - 1 / M) * s) for wn, s in zip(w, sig, strict=False)))
    )


def lemma5_loss(steps: Sequence[int], K: int, M: int, lr: float) -> np.ndarray:
    """ℒ(s) = log(1 + (M−1) e^{−M h*(s)}), h* the Lemma 5 recursion at step η/K: exact GD from θ = 0 on K
    equally likely classes with disjoint supports (Z never moves; w_n = Yᵀf_n = (M−1)h*(s)ζ_n, §4)."""
    s = np.asarray(steps, dtype=int)
    hs = np.asarray(h_star(int(s.max()), M, lr / K))[s]
    return np.log1p((M - 1) * np.exp(-M * hs))


def _stepsize_rows(
    traj: Trajectory, audit: StepSizeAudit, lrs: list[float], K: int, M: int, lemma5: bool
) -> list[dict[str, Any]]:
    """Per learning rate, the audit's summary row (``StepSizeAudit.summary``) with the run's status, λ_max(θ_0),
    its final loss and, when ``lemma5``, the largest relative error of the recorded loss against Lemma 5's.

    **Arguments:** ``traj`` the batched GD run, one run per rate; ``audit`` its audit; ``lrs`` the rates; ``K``,
    ``M`` classes and vocabulary size; ``lemma5`` whether Lemma 5 solves these runs (plain GD, disjoint supports)."""
    loss, ts = np.asarray(traj.loss), np.asarray(traj.ts)
    rows = cast(list[dict[str, Any]], audit.summary())  # a batch: one row per learning rate
    for i, (row, lr) in enumerate(zip(rows, lrs, strict=False)):
        row |= {
            "status": STATUS_NAMES[int(traj.status[i])],
            "lambda_max_start": float(audit.lambda_max[i, 0]),
            "final_loss": float(loss[i, -1]),
        }
        if lemma5:
            ok = np.isfinite(ts[i])
            exact = lemma5_loss(ts[i][ok].astype(int), K, M, lr)
            row["lemma5_loss_max_rel_error"] = float(np.max(np.abs(loss[i][ok] - exact) / exact))
    return rows


def _stepsize_checks(rows: list[dict[str, Any]], zero: HessianAtZero, lemma5: bool) -> dict[str, bool]:
    """What §5 gives, checked by name: λ_max(θ_0) ≥ the Y–Y block bound; = the closed form when the supports are
    disjoint; the loss = Lemma 5's (relative error < 1e-9) when ``lemma5``.

    **Arguments:** ``rows`` the runs (``_stepsize_rows``); ``zero`` the Hessian at 0; ``lemma5`` as there."""
    lam0 = np.array([r["lambda_max_start"] for r in rows])
    checks = {"start_at_least_Y_block": bool(np.all(lam0 >= zero.lambda_Y_block * (1 - 1e-9)))}
    if zero.lambda_max is not None:
        checks["start_matches_closed_form"] = bool(np.allclose(lam0, zero.lambda_max, rtol=1e-8))
    if lemma5:
        checks["loss_matches_lemma5"] = all(r["lemma5_loss_max_rel_error"] < 1e-9 for r in rows)
    return checks


def _stepsize_figure(audit: StepSizeAudit, loss: np.ndarray, lrs: list[float], zero: HessianAtZero) -> Figure:
    """The audit's figure (``plot_step_size_audit``) with the Hessian at θ = 0 marked: the Y–Y block bound as a
    line, the closed form (disjoint supports) as a star.

    **Arguments:** ``audit`` the audit; ``loss`` the recorded losses, one row per rate; ``lrs`` the rates;
    ``zero`` the Hessian at 0."""
    audits = [audit.run(i) for i in range(len(lrs))]
    fig = plot_step_size_audit(audits, list(loss), [f"η = {lr:g}" for lr in lrs])
    ax = fig.axes[0]
    ax.axhline(zero.lambda_Y_block, color="k", lw=0.8, ls="-.", label="Y–Y block at θ = 0 (lower bound)")
    if zero.lambda_max is not None:
        ax.plot([0], [zero.lambda_max], "k*", ms=9, label="λ_max(θ = 0), closed form")
    ax.legend(fontsize=7)
    return fig


@registered
def stepsize_scan_snap(
    lrs: Sequence[float] = DECLARED,
    steps: int = DECLARED,
    record_every: int = DECLARED,
    K: int = DECLARED,
    n_common: int = DECLARED,
    n_distinct: int = DECLARED,
    M: int | None = DECLARED,
    momentum: float = DECLARED,
) -> Result:
    """Exact GD from θ = 0 with one rate η for Y and Z (η_Y = η_Z, Fig. 4's left panel), one run per η in ``lrs``
    in one batched call, with λ_max(∇²L(θ_s)) audited against 1/η (monotone) and 2/η (stable) at every record
    (docs/jobs.md); with heavy-ball ``momentum`` μ (the paper trains with μ = 0.9) against (1 − √μ)²/η and
    2(1 + μ)/η.

    The paper states no step-size condition (§5); what §5 does give is checked: λ_max(θ_0) against the Hessian at 0
    (``hessian_at_zero``: §5's Y–Y block bounds it below; with no common token its exact value
    max_n π_n max(1/M, √(1−1/M) σ_max(J_n)) [derived]) and, with no common token, the recorded loss against
    Lemma 5's exact GD solution (``lemma5_loss``). λ_max by Lanczos (64 steps, full reorthogonalisation).

    **Arguments:** ``lrs`` learning rates η; ``steps`` GD steps per run; ``record_every`` steps between audited
    records; ``K`` classes; ``n_common``, ``n_distinct`` common tokens and distinct tokens per class (defaults:
    Syn-Small's counts, but one shared query, M = 33); ``M`` vocabulary size (None: exactly the tokens the classes
    use); ``momentum`` μ in [0, 1) (Lemma 5's loss is compared at μ = 0 only).
    """
    lrs = _positive_numbers("lrs", lrs, "learning rates")
    steps = _validate.int_at_least("steps", steps, 1)
    record_every = _validate.int_at_least("record_every", record_every, 1)
    if steps % record_every:
        raise ValueError(f"record_every={record_every} is invalid: must divide steps={steps}")
    K, n_common, n_distinct, M = _check_data(K, n_common, n_distinct, M)

    classes = shared_query_classes(K, n_common, n_distinct, M)
    prob = ScanSnap(classes)
    zero = hessian_at_zero(classes)
    lr_arr = np.array(lrs)
    batch = jax.tree_util.tree_map(lambda x: jnp.stack([x] * len(lrs)), prob.init(None))
    traj = gradient_descent(
        prob, batch, lr=lr_arr, steps=steps, record_every=record_every, save_params=True, momentum=momentum
    )
    audit = step_size_audit(prob, traj, lr_arr, method="lanczos", momentum=momentum)
    lemma5 = zero.lambda_max is not None and momentum == 0  # Lemma 5 solves plain GD on disjoint supports
    rows = _stepsize_rows(traj, audit, lrs, K, classes.M, lemma5)
    inputs = {
        "task": "scan-snap",
        "lrs": lrs,
        "steps": steps,
        "record_every": record_every,
        "K": K,
        "n_common": n_common,
        "n_distinct": n_distinct,
        "M": classes.M,
        "init": "Y = Z = 0",
        "rates": "η_Y = η_Z = η",
        "momentum": momentum,
        "lambda_method": "lanczos",
    }
    results = {"hessian_at_zero": zero._asdict(), "runs": rows, "checks": _stepsize_checks(rows, zero, lemma5)}
    loss, ts = np.asarray(traj.loss), np.asarray(traj.ts)
    arrays = {"stepsize": {"steps": ts, "lambda_max": audit.lambda_max, "loss": loss, "lr": lr_arr}}
    res = Result(inputs, results, arrays=arrays, figures={"stepsize": _stepsize_figure(audit, loss, lrs, zero)})
    res.lines.append(
        f"stepsize scan-snap  K={K}, M={classes.M}, {n_common} common + {n_distinct} distinct tokens "
        f"per class, exact GD from θ = 0 (η_Y = η_Z = η{f', momentum {momentum:g}' if momentum else ''}), {steps} steps"
    )
    closed = "" if zero.lambda_max is None else f"; closed form λ_max(0) = {zero.lambda_max:.6f}"
    res.lines.append(
        f"  θ = 0: λ_max = {rows[0]['lambda_max_start']:.6f}, Y–Y block bound {zero.lambda_Y_block:.6f}{closed}"
    )
    for i, r in enumerate(rows):
        extra = f"; loss vs Lemma 5 max rel. error {r['lemma5_loss_max_rel_error']:.1e}" if lemma5 else ""
        res.lines.append(
            f"  η = {r['lr']:<6g} {audit.verdict(i)}; final loss {r['final_loss']:.6g}, {r['status']}{extra}"
        )
    return res


# ---- basins: which distinct token wins the scan ---------------------------------------------------------------------
class _BasinsSettings(NamedTuple):
    """The validated settings of ``basins_scan_snap`` (the arguments of the same names; ``grid`` points per axis,
    ``x_range`` = decoder_range, ``y_range`` = logit_range)."""

    grid: int
    x_range: tuple[float, float]
    y_range: tuple[float, float]
    K: int
    n_common: int
    n_distinct: int
    M: int | None
    eta_y: float
    eta_z: float
    gtol: float
    t1: float
    chunk: int


def _check_basins(
    grid, decoder_range, logit_range, K, n_common, n_distinct, M, eta_y, eta_z, gtol, t1, chunk
) -> _BasinsSettings:
    """``basins_scan_snap``'s settings validated (its arguments of the same names), or ValueError."""
    n = _validate.int_at_least("grid", grid, 2)
    x_range = _validate.interval("decoder_range", decoder_range)
    y_range = _validate.interval("logit_range", logit_range)
    K, n_common, n_distinct, M = _check_data(K, n_common, n_distinct, M)
    if n_distinct < 2:
        raise ValueError(f"n_distinct={n_distinct!r} is out of range: must be an integer >= 2 (a runner-up token)")
    return _BasinsSettings(
        n,
        x_range,
        y_range,
        K,
        n_common,
        n_distinct,
        M,
        _validate.positive("eta_y", eta_y),
        _validate.positive("eta_z", eta_z),
        _validate.positive("gtol", gtol),
        _validate.positive("t1", t1),
        _validate.int_at_least("chunk", chunk, 1),
    )


class _ScanTokens(NamedTuple):
    """The tokens of class 0 that Theorem 3's ranking is about (``_scan_tokens``).

    **Fields:** ``probs`` P(·|n₀) over the vocabulary; ``dist`` its distinct tokens (ascending); ``top`` l₁, the
    most frequent of them; ``runner_up`` l₂, the next; ``query`` m, the class's query token; ``next_token`` n₀;
    ``tie`` ln(P(l₁|n₀)/P(l₂|n₀)), the logit z_ml₂(0) at which l₂ ties with l₁."""

    probs: np.ndarray
    dist: np.ndarray
    top: int
    runner_up: int
    query: int
    next_token: int
    tie: float


def _scan_tokens(classes: Classes) -> _ScanTokens:
    """Class 0's most frequent distinct token l₁, its runner-up l₂ and where they tie (``_ScanTokens``)."""
    P = classes.probs[0]
    dist = np.flatnonzero(classes.distinct()[0])
    l1, l2 = dist[np.argsort(-P[dist], kind="stable")[:2]]
    tie = float(np.log(P[l1] / P[l2]))
    return _ScanTokens(P, dist, int(l1), int(l2), int(classes.query[0]), int(classes.label[0]), tie)


def _theorem3_column(plane: Grid, labels: np.ndarray, tok: _ScanTokens) -> tuple[np.ndarray, float | None]:
    """Theorem 3 on the column x = 0 of the map: the winner argmax_l P(l|n) e^{z_ml(0)} predicted per row (an index
    into the class's distinct tokens), and the share of the column's labels that agree (None when x = 0 is not
    on the grid).

    **Arguments:** ``plane`` the map's grid; ``labels`` its labels (rows y, columns x); ``tok`` class 0's tokens."""
    logc0 = np.log(tok.probs[tok.dist])[None, :] + np.where(tok.dist == tok.runner_up, plane.ys[:, None], 0.0)
    predicted_column = np.argmax(logc0, axis=1)
    x_range = plane.x_range
    col = np.flatnonzero(np.isclose(plane.xs, 0.0, atol=1e-12 * (x_range[1] - x_range[0])))
    if not col.size:
        return predicted_column, None
    return predicted_column, float(np.mean(labels[:, col[0]] == predicted_column))


def _basins_inputs(s: _BasinsSettings, axes: tuple[str, str], M: int) -> dict[str, Any]:
    """The summary's inputs of ``basins_scan_snap``: the settings ``s``, the ``axes`` and the vocabulary size
    ``M``."""
    return {
        "task": "scan-snap",
        "grid": s.grid,
        "x": axes[0],
        "y": axes[1],
        "decoder_range": list(s.x_range),
        "logit_range": list(s.y_range),
        "K": s.K,
        "n_common": s.n_common,
        "n_distinct": s.n_distinct,
        "M": M,
        "eta_y": s.eta_y,
        "eta_z": s.eta_z,
        "gtol": s.gtol,
        "t1": s.t1,
        "method": "flow",
        "base": "θ = 0",
    }


def _basins_results(bm: BasinMap, tok: _ScanTokens, agree: float | None, boundary: list) -> dict[str, Any]:
    """The summary's results of ``basins_scan_snap``: the map's fractions and statuses, class 0's tokens, the
    Theorem 3 tie and agreement on x = 0, the measured boundary per column and the median time to the end.

    **Arguments:** ``bm`` the map; ``tok`` class 0's tokens; ``agree`` the agreement on x = 0 (None: off the
    grid); ``boundary`` the switching logit per column (None where the column does not switch once)."""
    return {
        "fractions": bm.fractions,
        "attractors": list(bm.attractors),
        "status_counts": bm.status_counts(),
        "resolved_fraction": bm.resolved_fraction,
        "tokens": {"top": tok.top, "runner_up": tok.runner_up, "query": tok.query, "next_token": tok.next_token},
        "distinct_token_probs": {int(t): float(tok.probs[t]) for t in tok.dist},
        "theorem3_tie": tok.tie,
        "agreement_on_x0_column": agree,
        "boundary_logit_per_column": boundary,
        "median_time": float(np.nanmedian(bm.times)) if np.isfinite(bm.times).any() else None,
    }


def _basins_lines(
    title: str, s: _BasinsSettings, axes: tuple[str, str], bm: BasinMap, tok: _ScanTokens, results: dict[str, Any]
) -> list[str]:
    """The printed summary of ``basins_scan_snap``: the map, its fractions and statuses, the Theorem 3 tie with
    the agreement on x = 0, and the measured boundary per column.

    **Arguments:** ``title`` the map's title; ``s`` the settings; ``axes`` the slice's axes; ``bm`` the map;
    ``tok`` class 0's tokens; ``results`` the summary's results (``_basins_results``)."""
    agree = results["agreement_on_x0_column"]
    return [
        f"basins scan-snap  {title}: x = {axes[0]}, y = {axes[1]}, grid {s.grid}x{s.grid} over {list(s.x_range)} x "
        f"{list(s.y_range)}",
        *(f"  {name:>14s}: {100 * f:6.2f}%" for name, f in bm.fractions.items()),
        "  status: "
        + ", ".join(f"{k} {v}" for k, v in bm.status_counts().items() if v)
        + f" (a run ends at ‖τ⊙∇L‖ < {s.gtol:g}: the loss has no minimiser; converged/saddle say only "
        "whether the Hessian there has a negative eigenvalue)",
        f"  Theorem 3 tie at x = 0: y = ln(P({tok.top})/P({tok.runner_up})) = {tok.tie:.6f}; "
        + (
            "agreement on the x = 0 column " + f"{100 * agree:.1f}%"
            if agree is not None
            else "x = 0 is not on the grid (use an odd grid and a decoder_range symmetric about 0)"
        ),
        "  measured boundary y per column (x ascending): "
        + ", ".join("none" if b is None else f"{b:.3f}" for b in results["boundary_logit_per_column"]),
    ]


@registered
def basins_scan_snap(
    grid: int = DECLARED,
    decoder_range: tuple[float, float] = DECLARED,
    logit_range: tuple[float, float] = DECLARED,
    K: int = DECLARED,
    n_common: int = DECLARED,
    n_distinct: int = DECLARED,
    M: int | None = DECLARED,
    eta_y: float = DECLARED,
    eta_z: float = DECLARED,
    gtol: float = DECLARED,
    t1: float = DECLARED,
    chunk: int = DECLARED,
    progress: bool = True,
    checkpoint: str | os.PathLike | None = None,
) -> Result:
    """Which distinct token of class 0 wins the scan (the most attention among its distinct tokens at the end),
    over a grid × grid slice of initial values of one decoder weight and one attention logit, all else 0:
    x = Y[l₂, n₀] (from class 0's runner-up distinct token l₂ to its next token n₀), y = Z[m, l₂] (the query's
    logit on l₂); exact joint gradient flow at rates (η_Y, η_Z) (docs/jobs.md).

    Theory (Theorem 3): the ranking of c̃_l = P(l|n)e^{z_ml} among a class's distinct tokens never changes, so from
    Y(0) = 0 (the column x = 0) the winner is argmax_l P(l|n)e^{z_ml(0)}: l₂ wins iff y > ln(P(l₁|n)/P(l₂|n)), l₁
    the most frequent. This holds in the joint flow too, not only under Eq. (10): at a tie,
    d/dt(z_ml − z_ml') = η_Z π_n f_nl (Y_l − Y_l')ᵀ(e_n − α_n) with Y_l − Y_l' = η_Y π_n ∫(f_nl − f_nl')(e_n − α_n)ᵀ
    > 0 for the token that led [derived]. Off that column nothing is predicted; x > 0 gives l₂ a head start.
    [our choice] The loss has no minimiser (ℒ → 0 only as ‖Y‖ → ∞, Y ~ ln t), so a run ends when
    ‖τ⊙∇ℒ‖ < ``gtol`` (the authors' "until convergence"); end points are labelled by theory residuals
    ("token l wins"), which need no minimum.

    **Arguments:** ``grid`` points per axis; ``decoder_range`` range of x = Y[l₂, n₀](0); ``logit_range`` range
    of y = Z[m, l₂](0); ``K`` classes (one shared query); ``n_common``, ``n_distinct`` common and distinct tokens
    per class (n_distinct ≥ 2); ``M`` vocabulary size (None: only the tokens used; [our choice] 20 by default, so
    that θ has more than 512 numbers and the end points' Hessian checks run by Lanczos, much faster than dense
    spectra over a grid; the unused tokens only enlarge the output softmax, and the theory above holds for every
    M); ``eta_y``, ``eta_z`` rates η_Y, η_Z; ``gtol`` the gradient norm that ends a run; ``t1`` the flow's
    horizon; ``chunk`` starts per chunk; ``progress`` show a progress bar; ``checkpoint`` a directory to save
    finished chunks in and resume from.
    """
    s = _check_basins(grid, decoder_range, logit_range, K, n_common, n_distinct, M, eta_y, eta_z, gtol, t1, chunk)
    classes = shared_query_classes(s.K, s.n_common, s.n_distinct, s.M)
    tok = _scan_tokens(classes)
    axes = (f"Y[{tok.runner_up},{tok.next_token}]", f"Z[{tok.query},{tok.runner_up}]")
    wp = token_winner(ScanSnap(classes), 0, axes, tok.tie)
    plane = Grid(*axes, s.x_range, s.y_range, (s.grid, s.grid))
    bm = basin_map(
        wp,
        plane,
        "flow",
        t1=s.t1,
        gtol=s.gtol,
        precondition=_block_rates(s.eta_y, s.eta_z),  # a sweep over the rates compiles once
        chunk_size=s.chunk,
        progress=progress,
        checkpoint=checkpoint,
    )
    predicted_column, agree = _theorem3_column(plane, bm.labels, tok)
    i2 = int(np.flatnonzero(tok.dist == tok.runner_up)[0])
    boundary = [_switch(plane.ys, bm.labels[:, j], i2) for j in range(s.grid)]
    results = _basins_results(bm, tok, agree, boundary)
    title = f"scan winner of class 0, η_Y = {s.eta_y:g}, η_Z = {s.eta_z:g}"
    inputs = _basins_inputs(s, axes, classes.M)
    res = basin_result(bm, wp, title, inputs, results, predicted_x0=predicted_column)
    res.lines += _basins_lines(title, s, axes, bm, tok, results)
    return res


def _switch(ys: np.ndarray, labels: np.ndarray, winner: int) -> float | None:
    """The y midway between the last row not won by ``winner`` and the first row won by it, when the column has
    exactly one such switch (None otherwise)."""
    won = labels == winner
    if labels.min() < 0 or won.all() or not won.any() or np.any(np.diff(won.astype(int)) < 0):
        return None
    j = int(np.argmax(won))
    return float((ys[j - 1] + ys[j]) / 2)
