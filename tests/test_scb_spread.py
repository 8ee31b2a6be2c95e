"""``popdyn reproduce scb-spread`` (docs/models/scb.md, "SGD's distance to the population process"): stage 2's plain SGD
seen from the whitened coordinates of ``Whitened``, its first-order spread (``popdyn.sgd_spread``) against an
ensemble of SGD runs, and the signal."""

import io

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree

from popdyn.figures import FIGURES
from popdyn.figures._scb_spread import scb_spread
from popdyn.jobs.scb import SpreadSetup
from popdyn.jobs.scb._spread import _crossings, _departure, signal_distance
from popdyn.tasks.scb import SparseBigram, Whitened, minibatch_gradient, random_instance

PROB = SparseBigram(*random_instance(jax.random.PRNGKey(3), 3, 2, 2))


def _on_manifold(alpha_V, alpha_A):
    """(V, A) = (μ1ᵀ + α_V(P − μ1ᵀ), 11ᵀ/T + α_A(Qm − 11ᵀ/T)), a point of the invariant manifold 𝓜."""
    mu, T = PROB.mu, PROB.T
    return {"V": mu[:, None] + alpha_V * (PROB.P - mu[:, None]), "A": 1.0 / T + alpha_A * (PROB.Qm - 1.0 / T)}


@pytest.mark.slow
def test_whitened_examples_step_as_stage2_and_measure_the_mu_norm():
    """A step of the whitened examples' mean gradient is stage 2's preconditioned, projected minibatch step on θ
    (``minibatch_gradient``, project=True), and ‖u − u'‖ is the μ-norm √(‖ΔV‖_μ² + ‖ΔA‖_μ²)."""
    origin = _on_manifold(0.3, 0.2)
    white = Whitened(PROB, origin)
    u = {"V": 0.1 * jnp.arange(9.0).reshape(3, 3) / 9, "A": jnp.array([[0.05, -0.02, 0.01], [-0.05, 0.02, -0.01]])}
    theta = white.theta(u)
    X, k, y = PROB.sample(jax.random.PRNGKey(0), 7)
    grads = jax.vmap(jax.grad(white.example_loss), in_axes=(None, 0))(u, {"X": X, "k": k, "y": y})
    mean = jax.tree_util.tree_map(lambda g: g.mean(axis=0), grads)
    lr = 0.1
    stepped = white.theta(jax.tree_util.tree_map(lambda a, g: a - lr * g, u, mean))
    direct = minibatch_gradient(PROB, theta, (X, k, y), project=True)
    for b in ("V", "A"):
        want = theta[b] - lr * direct[b]
        np.testing.assert_allclose(stepped[b], want, rtol=1e-12, atol=1e-12 * float(jnp.abs(want).max()))
    other = white.at(white.theta(jax.tree_util.tree_map(lambda a: 0.5 * a, u)))
    gap = float(jnp.linalg.norm(ravel_pytree(u)[0] - ravel_pytree(other)[0]))
    th2 = white.theta(other)
    mu_gap = float(jnp.sqrt(PROB.mu_norm(theta["V"] - th2["V"]) ** 2 + PROB.mu_norm(theta["A"] - th2["A"]) ** 2))
    np.testing.assert_allclose(gap, mu_gap, rtol=1e-12)


def test_signal_is_the_papers_signals_in_mu_units():
    """On 𝓜 the signal ‖θ − θ_0‖_μ is √(c α_V² + (q̄ − 1/T) α_A²)."""
    alphas = np.array([[0.1, 0.05], [0.7, 0.4], [1.0, 1.0]])
    theta = jax.vmap(_on_manifold)(alphas[:, 0], alphas[:, 1])
    want = np.sqrt(float(PROB.c) * alphas[:, 0] ** 2 + (float(PROB.qbar) - 1 / PROB.T) * alphas[:, 1] ** 2)
    np.testing.assert_allclose(signal_distance(PROB, theta), want, rtol=1e-12)


def test_departure_is_where_the_gap_holds_for_good():
    ts = np.arange(5) * 10
    assert _departure(np.array([False, True, False, True, True]), ts) == 30
    assert _departure(np.array([False, True, True, True, False]), ts) is None
    assert _departure(np.array([True, True, True, True, True]), ts) == 0


def test_crossings_find_where_the_noise_passes_the_signal_and_falls_back():
    ts = np.arange(6) * 10
    sig = np.ones(6)
    assert _crossings(np.array([0.0, 0.5, 1.5, 2.0, 0.9, 0.8]), sig, ts) == (20, 40)
    assert _crossings(np.array([0.0, 0.5, 1.5, 2.0, 3.0, 3.0]), sig, ts) == (20, None)
    assert _crossings(np.array([0.0, 0.5, 0.5, 0.5, 0.5, 0.5]), sig, ts) == (None, None)


@pytest.fixture(scope="module")
def small():
    """The figure at a small η on a tiny instance (81 draws, d = 15), where the first order holds."""
    setup = SpreadSetup(N=3, T=2, Q=2, lr=0.02, batches=(4,), steps=20, seeds=400, record_every=5)
    return scb_spread(setup, progress=False)


@pytest.mark.slow  # the whole job: stage 1, sgd_spread and 400 SGD runs compile ~25 s of CPU on 2 cores
def test_measured_spread_within_3_standard_errors_of_the_prediction(small):
    """At η = 0.02, B = 4 the mean of ‖Δ_t‖²_μ over 400 SGD runs is within 3 standard errors of tr C_t at the
    reported steps (t = 5 and the last, 20) and at the last record of the arrays, and the summary finds no departure;
    the noise stays below the signal."""
    r = small.results["batch_4"]
    assert r["departs_at"] is None and r["status"]["max_steps"] == 400 and r["report_steps"] == [5, 20]
    for ratio, se in zip(r["ratio"], r["ratio_stderr"], strict=True):
        assert abs(ratio - 1.0) <= 3 * se and 0 < se < 0.1
    pred, meas, err = (small.arrays["scb_spread"][f"{k}_4"] for k in ("predicted", "measured", "stderr"))
    assert pred[0] == 0.0 and meas[0] == 0.0 and np.all(pred[1:] > 0)
    assert abs(meas[-1] - pred[-1]) <= 3 * err[-1]
    assert r["crossing_step"] is None and 0 < r["max_noise_to_signal"] < 1


@pytest.mark.slow  # shares the job above
def test_figure_and_summary_fields(small):
    assert "scb-spread" in FIGURES
    r = small.results
    assert r["N"] == 3 and r["T"] == 2 and r["examples"] == 3**4 and r["params"] == 15 and r["stage1_steps"] >= 1
    assert 0 < r["signal_start"] < r["signal_end"]
    keys = {"crossing_step", "recrossing_step", "measured_crossing_step", "departs_at", "report_steps", "predicted"}
    assert keys <= set(r["batch_4"]) and r["batch_4"]["report_steps"][-1] == 20
    assert small.arrays["scb_spread"]["steps"][-1] == 20 and any("B=4" in line for line in small.lines)
    buf = io.BytesIO()
    small.figures["scb-spread"].savefig(buf, format="png")
    assert buf.tell() > 10_000


@pytest.mark.slow  # the job at its defaults, about 45 s on 2 cores
def test_cli_defaults_give_the_numbers_of_the_model_page(tmp_path, run_cli):
    """docs/models/scb.md §7.1 quotes these numbers of ``popdyn reproduce scb-spread`` (N = 3, T = 4, η = 0.1):
    at B = 256 the noise stays below 7% of the signal and first order holds; at B = 1 the predicted distance
    exceeds the signal from t = 10 to 70 (measured: 10 to 50) and the measurement leaves it for good at t = 30."""
    import json

    out = tmp_path / "spread"
    proc = run_cli("reproduce", "scb-spread", "--out", out)
    assert proc.returncode == 0, proc.stderr
    r = json.loads((out / "summary.json").read_text())["results"]
    assert (r["examples"], r["params"], r["steps"]) == (729, 21, 300)
    assert (round(r["signal_start"], 3), round(r["signal_end"], 3)) == (0.158, 0.689)
    quiet, loud = r["batch_256"], r["batch_1"]
    assert quiet["crossing_step"] is None and quiet["departs_at"] is None
    assert round(quiet["max_noise_to_signal"], 2) == 0.07
    assert quiet["report_steps"] == [20, 80, 300] and round(quiet["predicted"][-1], 4) == 0.0295
    assert [round(x, 2) for x in quiet["ratio"]] == [1.04, 1.01, 1.03]
    assert (loud["crossing_step"], loud["recrossing_step"]) == (10, 70)
    assert (loud["measured_crossing_step"], loud["measured_recrossing_step"], loud["departs_at"]) == (10, 50, 30)
    assert round(loud["max_noise_to_signal"], 2) == 1.18
    assert [round(x, 2) for x in loud["ratio"]] == [0.94, 0.76, 0.73]
    assert (out / "scb-spread.png").stat().st_size > 10_000


@pytest.mark.parametrize("batches", [(), (0,), (4, 4), (2.5,), "4"])
def test_bad_batches_are_refused_before_anything_runs(batches):
    with pytest.raises(ValueError, match="batches="):
        SpreadSetup(N=3, T=2, Q=2, batches=batches)


@pytest.mark.slow  # stage 1 and sgd_spread at the figure's size
def test_at_batch_16_the_predicted_noise_peaks_at_028_of_the_signal():
    """docs/models/scb.md §7.1 and ``SPREAD_BATCHES`` quote it: at the figure's instance, B = 16, the largest
    predicted √tr C_t is 0.28 times the signal, so B = 1 is the one batch of the figure whose noise passes it."""
    from popdyn import sgd_spread
    from popdyn.jobs.scb import signal_distance, stage2_start

    prob, s1 = stage2_start(3, 4, 2, 0)
    white = Whitened(prob, s1.theta)
    spread = sgd_spread(white, white.init(None), lr=0.1, batch=16, steps=300, record_every=10)
    sig = signal_distance(prob, jax.vmap(white.theta)(spread.path))
    assert round(float(np.max(np.sqrt(spread.expected_sq_distance) / sig)), 2) == 0.28
