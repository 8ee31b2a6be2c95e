"""Markov-chain jobs (docs/jobs.md) on the models of docs/models/markov.md: basin maps against the closed-form
partition, convergence against the local rate and step-size audits. Each validates its inputs first and returns a
``popdyn.io.Result``."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from popdyn import _validate, dynamics
from popdyn.analysis import Grid, basin_map, step_size_audit
from popdyn.analysis._stepsize import run_saddle_tol
from popdyn.analysis._times import asymptotic_rate, hitting_time, local_rate
from popdyn.dynamics import SGD, STATUS_NAMES, gradient_descent
from popdyn.io import Result
from popdyn.jobs._basin_result import basin_result
from popdyn.jobs._dynamics_options import SGDRuns, job_dynamics, settings
from popdyn.jobs._registry import DECLARED, registered
from popdyn.jobs._sgd_audit import curve_lines, sgd_curves, sgd_inputs, sgd_lines, sgd_replace
from popdyn.jobs._sgd_jobs import sgd_basins
from popdyn.jobs._spread import SpreadSettings, spread_job
from popdyn.plot import plot_convergence, plot_step_size_audit
from popdyn.tasks.markov import ATTRACTORS, Canonical


# ---- basins ---------------------------------------------------------------------------------------
@registered
def basins_markov(
    p=DECLARED,
    q=DECLARED,
    n=DECLARED,
    lo=DECLARED,
    hi=DECLARED,
    method=DECLARED,
    t1=DECLARED,
    lr=DECLARED,
    steps=DECLARED,
    chunk=DECLARED,
    progress=True,
    checkpoint=None,
    bias=DECLARED,
    momentum=DECLARED,
    gtol=DECLARED,
    solver=DECLARED,
    rtol=DECLARED,
    atol=DECLARED,
    max_steps=DECLARED,
    batch=DECLARED,
    seeds=DECLARED,
    sampling=DECLARED,
    seed=DECLARED,
) -> Result:
    """Basin map of the (e, w) model over [lo, hi]² (the bias profiled out, or ``bias="trained"`` from b = 0),
    checked against the closed form (§4.4, profiled bias only), run by ``job_dynamics`` of the method and its
    settings (GD with heavy-ball ``momentum``; ``gtol``: the absolute stopping rule ‖∇L‖ < gtol instead of the
    scale-aware one); ``checkpoint``: a directory to save finished chunks in and resume from (``basin_map``). With
    ``method="sgd"``, ``seeds`` SGD runs from each start on the model's training sequences (minibatches of ``batch``
    drawn by ``sampling``, streams from ``seed``): the map as probabilities (``sgd_basins_markov``)."""
    n = _validate.int_at_least("grid", n, 2)
    lo, hi = _validate.interval("range", (lo, hi))
    _validate.choice("bias", bias, ("profiled", "trained"))
    _validate.int_at_least("chunk", chunk, 1)
    flow = {"t1": t1, "solver": solver, "max_steps": max_steps}
    tolerances = {"rtol": rtol, "atol": atol, "gtol": gtol}
    sgd = SGDRuns(batch, seeds, sampling, seed)
    dyn = job_dynamics(method, lr=lr, steps=steps, momentum=momentum, sgd=sgd, **flow, **tolerances)
    prob = Canonical(p, q, bias=bias)
    grid = Grid.square("w", "e", lo, hi, n)
    theory = prob.theorem_applies() and bias == "profiled"  # §4.4's closed-form basins: p+q != 1, profiled bias
    if isinstance(dyn, SGD):
        inputs = {"task": "markov", "p": p, "q": q, "grid": n, "range": [lo, hi], "bias": bias, **settings(dyn)}
        run = {"chunk_size": chunk, "progress": progress, "checkpoint": checkpoint}
        return sgd_basins_markov(prob, grid, dyn, theory, run, inputs)
    with ThreadPoolExecutor(1) as pool:  # the closed-form check needs no end point: it runs beside the dynamics
        check = pool.submit(_closed_form_basins, prob, grid) if theory else None
        bm = basin_map(prob, grid, dyn, chunk_size=chunk, progress=progress, checkpoint=checkpoint)
    if check is not None:
        predicted, far = check.result()
        judged = far & (bm.labels >= 0)  # unresolved points are not disagreements: they are counted apart
        agree = float(np.mean((predicted == bm.labels)[judged])) if judged.any() else None
    else:
        predicted, agree, judged = np.full(grid.shape, -1), None, np.zeros(grid.shape, bool)
    inputs = {
        "task": "markov",
        "p": p,
        "q": q,
        "grid": n,
        "range": [lo, hi],
        "bias": bias,
        **settings(dyn, method),
    }
    results = {
        "fractions": bm.fractions,
        "attractors": list(bm.attractors),
        "status_counts": {name: int(np.sum(bm.status == code)) for code, name in enumerate(STATUS_NAMES)},
        "resolved_fraction": bm.resolved_fraction,
        "agreement_with_theory": agree,
        "agreement_over": f"{int(judged.sum())} resolved points farther than 0.05 from the separatrix "
        f"(unresolved points and points near the separatrix excluded)",
        "median_time": float(np.nanmedian(bm.times)) if np.isfinite(bm.times).any() else None,
    }
    title = f"p={p}, q={q} (p+q{'<' if p + q < 1 else '>' if p + q > 1 else '='}1), {method}"
    res = basin_result(bm, prob, title, inputs, results, ("w", "e"), predicted=predicted)
    res.lines += [f"basins  {title}  grid {n}x{n} over [{lo}, {hi}]^2"]
    res.lines += [f"  {name:>10s}: {100 * f:6.2f}%" for name, f in bm.fractions.items()]
    res.lines.append("  status: " + ", ".join(f"{k} {v}" for k, v in bm.status_counts().items() if v))
    if agree is not None:
        res.lines.append(
            f"  agreement with the closed-form basins (§4.4): {100 * agree:.2f}% of the "
            f"{int(judged.sum())} resolved points away from the separatrix"
        )
    return res


def sgd_basins_markov(prob: Canonical, grid: Grid, dyn: SGD, theory: bool, run: dict, inputs: dict) -> Result:
    """``popdyn basins markov --method sgd``: the map as probabilities beside GD's (``sgd_basins``) and, where the
    closed form applies (``theory``), the share of starts farther than 0.05 from its separatrix whose most likely
    outcome over the seeds is the closed form's attractor (§4.4; unresolved starts are counted apart).

    **Arguments:** ``prob``, ``grid``: the model and the (w, e) grid; ``dyn``: the SGD runs; ``run``: chunk size,
    progress and checkpoint; ``inputs``: the job's inputs."""
    title = f"p={prob.p}, q={prob.q}, sgd"
    res = sgd_basins(prob, grid, dyn, None, run, title, inputs)
    if not theory:
        return res
    predicted, far = _closed_form_basins(prob, grid)
    basins = res.arrays["basins"]
    names = np.asarray(basins["attractors"])
    likely = names[np.argmax(basins["probabilities"], axis=-1)]
    judged = far & (likely != "unresolved") & (predicted >= 0)  # the closed form names an attractor there
    expected = np.asarray(ATTRACTORS, dtype=object)[np.maximum(predicted, 0)]
    agree = float(np.mean((likely == expected)[judged])) if judged.any() else None
    res.results |= {"agreement_with_theory": agree, "agreement_over": f"{int(judged.sum())} starts farther than 0.05 "
                    "from the separatrix whose most likely outcome is an attractor"}  # fmt: skip
    basins["predicted"] = predicted
    if agree is not None:
        res.lines.insert(-1, f"  most likely outcome = the closed form's basin (§4.4) at {100 * agree:.2f}% of the "
                         f"{int(judged.sum())} starts away from the separatrix")  # fmt: skip
    return res


@eqx.filter_jit
def _predicted_basins(prob: Canonical, theta: dict) -> jax.Array:
    """The closed-form label of every point: p and q enter as arguments, so one program serves every (p, q)."""
    return jax.vmap(prob.predicted_basin)(theta)


def _closed_form_basins(prob: Canonical, grid: Grid) -> tuple[np.ndarray, np.ndarray]:
    """(the closed-form basin label of every grid point (§4.4), whether it lies farther than 0.05 from the
    separatrix): points closer are left out of the agreement (docs/basins.md, "Agreement with a closed form")."""
    theta = grid.points(prob)
    predicted = np.asarray(_predicted_basins(prob, theta)).reshape(grid.shape)
    return predicted, np.asarray(prob.separatrix_distance(theta)).reshape(grid.shape) > 0.05


# ---- converge -------------------------------------------------------------------------------------
@registered
def converge_markov(
    p=DECLARED, q=DECLARED, n_init=DECLARED, std=DECLARED, seed=DECLARED, eps=DECLARED, t1=DECLARED
) -> Result:
    """Time for the profiled flow to enter the ε-ball around its closed-form limit, against the local
    rate λ (the nonzero Hessian eigenvalue at the limit, §4.6): T_pred = T(1e-2) + ln(1e-2/ε)/λ."""
    n_init = _validate.int_at_least("n-init", n_init, 1)
    std = _validate.positive("std", std)
    eps = _validate.positive("eps", eps)
    t1 = _validate.positive("t1", t1)
    seed = _validate.seed("seed", seed)
    prob = Canonical(p, q)
    key = jax.random.PRNGKey(seed)
    z = std * jax.random.normal(key, (n_init, 2))
    theta0 = {"e": z[:, 0], "w": z[:, 1]}
    ts = np.concatenate([[0.0], np.geomspace(1e-3, t1, 600)])
    traj = dynamics.gradient_flow(prob, theta0, t1=t1, ts=ts, save_params=True, rtol=1e-10, atol=1e-12)
    theory = prob.theorem_applies()
    if theory:  # the closed-form limit of §4.4
        limit = jax.vmap(prob.predicted_limit)(theta0)
        basin = np.asarray(jax.vmap(prob.predicted_basin)(theta0))
    else:  # no closed form at p+q = 1: measure against the flow's own end point
        limit = traj.final
        basin = np.full(n_init, -2)
    params = traj.params
    assert params is not None  # recorded: save_params=True
    dist = np.sqrt(sum((np.asarray(params[k]) - np.asarray(limit[k])[:, None]) ** 2 for k in ("e", "w")))
    rows, rates = [], []
    for i in range(n_init):
        lim_i = {k: limit[k][i] for k in ("e", "w")}
        lam = local_rate(prob, lim_i) if basin[i] in (0, 1, -2) else float("nan")
        t_eps = hitting_time(traj.ts[i], dist[i], eps)
        t_anchor = hitting_time(traj.ts[i], dist[i], 1e-2)
        t_pred = t_anchor + np.log(1e-2 / eps) / lam if eps < 1e-2 else float("nan")
        rate = asymptotic_rate(traj.ts[i], dist[i], hi=1e-3, lo=max(eps / 100, 1e-9))
        rates.append(lam)
        rows.append(
            {
                "e0": float(theta0["e"][i]),
                "w0": float(theta0["w"][i]),
                "basin": ATTRACTORS[basin[i]] if basin[i] >= 0 else "n/a" if basin[i] == -2 else "none",
                "e_inf": float(lim_i["e"]),
                "w_inf": float(lim_i["w"]),
                "status": traj.status_names[int(traj.status[i])],
                "T_eps": t_eps,
                "T_pred": t_pred,
                "rate_measured": rate,
                "rate_predicted": lam,
            }
        )
    inputs = {
        "task": "markov",
        "p": p,
        "q": q,
        "n_init": n_init,
        "std": std,
        "seed": seed,
        "eps": eps,
        "t1": t1,
        "limit": "closed form (§4.4)" if theory else "flow end point (no closed form at p+q = 1)",
    }
    labels = [f"({r['e0']:+.2f}, {r['w0']:+.2f}) → {r['basin']}" for r in rows]
    res = Result(
        inputs,
        {"rows": rows},
        arrays={"convergence": {"ts": np.asarray(traj.ts), "dist": dist, "rate_predicted": np.array(rates)}},
        figures={"convergence": plot_convergence(np.asarray(traj.ts), dist, np.array(rates), eps, labels)},
    )
    res.lines.append(f"converge  p={p}, q={q}, ε={eps:g}: time to ‖θ_t − θ∞‖ ≤ ε vs local-rate prediction")
    res.lines.append(
        f"  {'(e0, w0)':>18s} {'basin':>7s} {'(e∞, w∞)':>20s} {'T_ε':>9s} {'T_pred':>9s} {'rate':>8s} {'λ':>8s}"
    )
    for r in rows:
        res.lines.append(
            f"  ({r['e0']:+7.3f}, {r['w0']:+7.3f}) {r['basin']:>7s} ({r['e_inf']:+8.4f}, {r['w_inf']:+8.4f}) "
            f"{r['T_eps']:9.2f} {r['T_pred']:9.2f} {r['rate_measured']:8.4f} {r['rate_predicted']:8.4f}"
        )
    return res


# ---- stepsize -------------------------------------------------------------------------------------
@registered
def stepsize_markov(
    p=DECLARED,
    q=DECLARED,
    e0=DECLARED,
    w0=DECLARED,
    lrs=DECLARED,
    steps=DECLARED,
    momentum=DECLARED,
    batch=DECLARED,
    sampling=DECLARED,
) -> Result:
    """GD from (e0, w0) at each η (heavy-ball ``momentum`` μ), with λ_max(∇²L(θ_t)) audited against 1/η and 2/η
    ((1 − √μ)²/η and 2(1 + μ)/η with momentum, ``step_size_audit``); with a minibatch size ``batch`` B (drawn by
    ``sampling``), GD's 2/λ_max and SGD's η*(B) at each end point and which holds at its η."""
    e0, w0 = _validate.finite("e0", e0), _validate.finite("w0", w0)
    lrs = [_validate.positive("lr", lr) for lr in lrs]
    steps = _validate.int_at_least("steps", steps, 1)
    prob = Canonical(p, q)
    replace = sgd_replace(prob, batch, sampling, momentum)
    theta0 = {"e": jnp.asarray(e0), "w": jnp.asarray(w0)}
    audits, losses, rows, ends = [], [], [], []
    for lr in lrs:
        traj = gradient_descent(prob, theta0, lr=lr, steps=steps, save_params=True, momentum=momentum)
        audit = step_size_audit(prob, traj, lr, momentum=momentum, batch=batch, replace=replace)
        audits.append(audit)
        losses.append(np.asarray(traj.loss))
        ends.append(traj.final)
        rows.append(
            audit.row().json()
            | {
                "status": traj.status_names[int(traj.status)],
                "final_loss": float(traj.loss[-1]),
                "entropy_rate": prob.entropy_rate(),
            }
        )
    inputs = {"task": "markov", "p": p, "q": q, "e0": e0, "w0": w0, "lr": lrs, "steps": steps, "momentum": momentum}
    inputs |= sgd_inputs(batch, replace)
    ts = np.stack([a.ts for a in audits])
    lam = np.stack([a.lambda_max for a in audits])
    results: dict = {"runs": rows}
    curves = None
    if batch is not None:
        curves = sgd_curves(prob, ends, [a.row() for a in audits], batch, replace, run_saddle_tol(traj))
        results["sgd_curves"] = [c.json() for c in curves]
    res = Result(
        inputs,
        results,
        arrays={"stepsize": {"steps": ts, "lambda_max": lam, "loss": np.stack(losses), "lr": np.array(lrs)}},
        figures={"stepsize": plot_step_size_audit(audits, losses, [f"η = {lr:g}" for lr in lrs], curves=curves)},
    )
    res.lines.append(f"stepsize  p={p}, q={q}, GD from (e, w) = ({e0}, {w0}), {steps} steps")
    for r, audit in zip(rows, audits, strict=False):
        res.lines.append(
            f"  η = {r['lr']:<6g} {audit.verdict()}; final loss {r['final_loss']:.6g} "
            f"(H_rate {r['entropy_rate']:.6f}), {r['status']}"
        )
    res.lines += [] if curves is None else sgd_lines(lrs, [(a, ()) for a in audits]) + curve_lines(curves)
    return res


# ---- SGD's spread --------------------------------------------------------------------------------------------------
@registered
def spread_markov(
    p=DECLARED,
    q=DECLARED,
    e0=DECLARED,
    w0=DECLARED,
    N=DECLARED,
    lr=DECLARED,
    batch=DECLARED,
    sampling=DECLARED,
    steps=DECLARED,
    record_every=DECLARED,
    seeds=DECLARED,
    seed=DECLARED,
    progress=False,
    checkpoint=None,
) -> Result:
    """SGD's spread around GD's path on the canonical (e, w) model from (e0, w0) (``spread_job``), its examples one
    training sequence of ``N`` predicted tokens each, by its transition counts (docs/models/markov.md, "Per-example
    data"): η = ``lr``, ``seeds`` SGD runs with minibatches of ``batch`` drawn by ``sampling`` from ``seed``."""
    e0, w0 = _validate.finite("e0", e0), _validate.finite("w0", w0)
    prob = Canonical(p, q, N=_validate.int_at_least("N", N, 1))
    settings = SpreadSettings(lr, SGDRuns(batch, seeds, sampling, seed), steps, record_every)
    theta0 = {"e": jnp.asarray(e0), "w": jnp.asarray(w0)}
    inputs = {"task": "markov", "p": p, "q": q, "e0": e0, "w0": w0, "N": N}
    title = f"markov p={p}, q={q}, (e, w) = ({e0}, {w0}), N = {N}"
    return spread_job(prob, theta0, title, inputs, settings, progress, checkpoint)
