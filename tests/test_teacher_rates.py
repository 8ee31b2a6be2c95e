"""Rates of the bilinear teachers from zero initialisation (docs/models/teacher.md §5, §6, §7): the late constant
KD(D−K)/4 for the four teachers and three activations, slopes, T*, the step-size audit, OOD, and the CLI."""

from __future__ import annotations

import dataclasses
import functools
import json

import numpy as np
import pytest

from popdyn.io import _jsonable
from popdyn.jobs.teacher.rates import FullModelCheck, RatesRun, default_steps, rates
from popdyn.tasks.teacher.builders import PAPER_SIZES, build

SMALL = {"cnn": (9, 3), "gcn": (9, 3), "sts": (9, 3), "gslp": (9, 1)}  # cnn, gcn, sts share one compilation
HORIZON = 3000  # ηT = 3000 × late onset: D = 9, K = 3 needs ~3000 for the 1/T constant (``rates``)


@functools.cache
def gcn_rates(activation: str) -> RatesRun:
    """``rates`` on gcn (D = 9, K = 3) to ηT = ``HORIZON`` × late onset, with the audit, OOD and full-model settings
    of ``popdyn converge teacher`` (12 audit points, 4000 OOD draws, 2000 full-model steps): computed once per
    activation for the tests below, and the command line's run at the same steps reuses its compiled programs."""
    return rates(build("gcn", 9, 3, activation), horizon=HORIZON)


@pytest.mark.slow
@pytest.mark.parametrize("activation", ["linear", "relu", "leaky"])
@pytest.mark.parametrize("teacher", ["cnn", "gcn", "sts", "gslp"])
def test_late_constant_for_each_teacher(teacher, activation):
    """ηT·(L − L_opt) → KD(D−K)/4 within 2% (measured within 0.5%) and the log-log slope of the excess loss is
    −1, for the four teachers and the three activations: the exact zero-initialisation GD at η = 1/λ_max(teacher)
    to ηT = 1000 × late onset (measured: within 0.8%, slope within 0.011), through the reduced map that ``rates``
    uses (full GD equals it, below)."""
    from popdyn.jobs.teacher.rates import reduced_records
    from popdyn.tasks.teacher import TeacherReduced, late_constant

    prob = build(teacher, *SMALL[teacher], activation)
    red = TeacherReduced.from_teacher(prob)
    lr = 1.0 / prob.lambda_max_at_teacher()
    ts, loss, _, status = reduced_records(red, lr, int(1000 * red.late_onset() / lr), 1000)
    t, excess = lr * ts, loss - float(red.L_opt)
    assert status == "max_steps" and np.all(np.isfinite(loss))
    assert abs(t[-1] * excess[-1] / late_constant(prob.D, prob.K) - 1) < 0.02
    late = t >= t[-1] / 10
    assert abs(np.polyfit(np.log(t[late]), np.log(excess[late]), 1)[0] + 1) < 0.02


@pytest.mark.slow
@pytest.mark.parametrize("activation", ["linear", "relu", "leaky"])
def test_rates_job(activation):
    """``rates`` on gcn (D = 9, K = 3): the late constant and slopes (parameter errors −1/2 with §5.2's
    constants); along the run λ_max stays below 1/η = λ_max at the teacher and comes within 10% of it (§6); the
    full model equals the reduced map; the OOD excess decays like 1/T (§7: exact for the identity, Monte Carlo
    with Exp(1) inputs otherwise)."""
    prob = build("gcn", 9, 3, activation)
    r = gcn_rates(activation)
    assert r.status == "max_steps" and r.horizon_over_onset >= 2990  # steps rounded to whole records
    assert abs(r.late_constant / r.late_constant_predicted - 1) < 0.02
    assert r.late_constant_predicted == prob.K * prob.D * (prob.D - prob.K) / 4
    assert abs(r.slopes["excess"] + 1) < 0.02
    for key in ("w_error", "s_error"):
        assert abs(r.slopes[key] + 0.5) < 0.02, (key, r.slopes[key])
        assert abs(r.constants_vs_derived[key] - 1) < 0.03, (key, r.constants_vs_derived[key])
    a = r.audit.row
    assert a.monotone_safe and a.max_lambda > 0.9 * a.one_over_lr
    assert abs(r.lambda_max_teacher * r.lr - 1) < 1e-12
    fm = r.full_model
    assert max(fm.max_abs_C1, fm.max_abs_Delta, fm.max_off_manifold) < 1e-10
    assert fm.max_rel_loss < 1e-10
    o = r.ood
    assert o.exact == (activation == "linear")
    assert np.all(np.isfinite(o.excess)) and o.excess[-1] < 0.05 * o.excess.max()
    assert o.slope is not None and abs(o.slope + 1) < 0.1


@pytest.mark.slow
def test_rates_record():
    """``rates`` returns a frozen ``RatesRun`` whose JSON part is every field but the recorded ``curves``, its audit,
    OOD and full-model records as mappings (the run of ``test_rates_job[linear]``)."""
    r = gcn_rates("linear")
    assert isinstance(r, RatesRun)
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.lr = 1.0
    out = r.json()
    assert list(out) == [
        "lr",
        "steps",
        "lambda_max_teacher",
        "late_onset",
        "horizon_over_onset",
        "status",
        "late_constant",
        "late_constant_predicted",
        "slopes",
        "slopes_poster",
        "constants_vs_derived",
        "poster",
        "T_star",
        "half_step",
        "half_over_T_star",
        "audit",
        "ood",
        "full_model",
    ]
    json.dumps(_jsonable(out), allow_nan=False)
    assert list(out["full_model"]) == list(FullModelCheck._fields) and out["audit"]["stable"] == r.audit.stable
    assert list(out["ood"]) == ["steps", "excess", "se", "slope", "exact"]
    assert r.steps == r.curves["steps"][-1] and len(r.curves["steps"]) > 2


@pytest.mark.slow
@pytest.mark.parametrize("activation, lo, hi", [("linear", 1.0, 1.4), ("relu", 2.4, 3.1)])
def test_half_time_scales_like_T_star(activation, lo, hi):
    """K·p reaches 1/2 at c·KD²/(σ_x²v) in flow time, with c ≈ 1.2 (identity) and 2.5–3.0 (ReLU), stable over
    D ∈ {20, 40, 80} and a ×5 change of v (§5.3) — the poster's T* = Θ(KD²/(η‖V*‖²)). Measured (K = 4,
    η = 0.05): identity 1.06–1.22, ReLU 2.58–2.85 (lowest at D = 20 in both)."""
    from popdyn.jobs.teacher.rates import half_step, reduced_records
    from popdyn.tasks.teacher import TeacherReduced

    cs, t_star = [], 40_000  # η chosen so that T* is this many steps in every case: one compilation serves all
    for D in (20, 40, 80):
        for v in (16.0, 80.0):
            red = TeacherReduced(D, 4, v, 1.0 if activation == "linear" else 0.0)
            lr = 4 * D**2 / (t_star * v)  # ≤ 0.04 < 1/λ_max at the teacher
            ts, _, params, _ = reduced_records(red, lr, 5 * t_star, 5 * t_star)
            Kp = 4 * np.asarray(red.attention_values(params["Delta"])[0])
            cs.append(half_step(ts, Kp) / t_star)
    assert lo < min(cs) and max(cs) < hi, cs
    assert max(cs) / min(cs) < 1.2, cs


def test_paper_sizes_and_build():
    for name, (D, K) in PAPER_SIZES.items():
        prob = build(name)
        assert (prob.D, prob.K) == (D, K)
    assert build("sts").M == build("sts").d == 4 and build("gslp").M == 1
    with pytest.raises(ValueError, match="teacher='cnnz'"):
        build("cnnz")


@pytest.mark.slow
def test_cli_converge_teacher(tmp_path, run_cli):
    """``popdyn converge teacher`` writes its arrays, figure and summary; leaky gcn (D = 9, K = 3) run to the steps of
    ``gcn_rates("leaky")`` (ηT = ``HORIZON`` × late onset), so the programs compiled there are reused."""
    from popdyn.tasks.teacher import TeacherReduced

    prob = build("gcn", 9, 3, "leaky")
    steps = default_steps(TeacherReduced.from_teacher(prob), 1.0 / prob.lambda_max_at_teacher(), HORIZON)
    out = tmp_path / "t"
    proc = run_cli(
        "converge",
        "teacher",
        "--teacher",
        "gcn",
        "--D",
        "9",
        "--K",
        "3",
        "--activation",
        "leaky",
        "--steps",
        steps,
        "--out",
        out,
        "--quiet",
    )
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in out.iterdir()) == ["audit.npz", "ood.npz", "rates.npz", "rates.png", "summary.json"]
    s = json.loads((out / "summary.json").read_text())
    assert s["inputs"]["teacher"] == "gcn" and s["inputs"]["alpha"] == 0.1
    r = s["results"]
    assert abs(r["late_constant_ratio"] - 1) < 0.02 and r["poster"]["excess"] == "Θ(K·D⁴/(ηT))"
    assert set(r["slopes"]) == {"excess", "w_error", "s_error"}


@pytest.mark.parametrize(
    "argv, text",
    [
        (["--teacher", "cnnz"], "invalid choice: 'cnnz'"),
        (["--D", "9", "--K", "2"], "K"),
        (["--activation", "tanh"], "invalid choice: 'tanh'"),
        (["--alpha", "1.5", "--activation", "leaky"], "alpha=1.5"),
    ],
)
def test_cli_converge_teacher_bad_input(tmp_path, capsys, argv, text):
    """One line on stderr, exit code 2, nothing written (the CLI's ``main`` in-process: no compilation)."""
    from popdyn._cli import main

    bad = tmp_path / "bad"
    assert main(["converge", "teacher", *argv, "--out", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and text in err, err
    assert not bad.exists()
