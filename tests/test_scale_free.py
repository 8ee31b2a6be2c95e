"""The stopping rule, the saddle test and the labels do not change when L is multiplied by 10^k (k in [−200, 200]);
degenerate critical points are never silently minima (docs/dynamics.md)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import popdyn
from popdyn import Status
from popdyn.analysis import label_end_points

KS = (-200, -150, -100, -50, -10, 0, 10, 50, 100, 150, 200)


def double_well(t, c):
    """c·((x² − 1)²/4 + y²/2): minima at (±1, 0), a saddle at the origin, reached from any start with x = 0."""
    return c * (0.25 * (t["x"] ** 2 - 1) ** 2 + 0.5 * t["y"] ** 2)


# the first and fourth starts end at the saddle (on the separatrix x = 0), the others at the two minima
STARTS = {"x": jnp.array([0.0, 0.3, -0.7, 0.0, 2.0]), "y": jnp.array([0.0, 0.5, -1.0, 1.5, 0.1])}
SADDLE_AT = np.array([True, False, False, True, False])


@pytest.mark.slow
def test_statuses_times_and_labels_do_not_change_when_the_loss_is_scaled():
    """Flow to t1·10^−k and GD at lr·10^−k: the same statuses, the same end points, flow times ×10^−k, the same GD
    steps and the same basin labels (by position and by loss level) for every k (the data leaf c = 10^k compiles
    nothing new)."""
    runs = {}
    for k in KS:
        prob = popdyn.Problem.from_loss(double_well, {"x": 0.0, "y": 0.0}, data=10.0**k)
        flow = popdyn.gradient_flow(prob, STARTS, t1=1e4 * 10.0**-k, ts=None)
        gd = popdyn.gradient_descent(prob, STARTS, lr=0.1 * 10.0**-k, steps=400, record_every=20)
        labels = [label_end_points(prob, t, features=f)[0] for t in (flow, gd) for f in ("position", "level")]
        runs[k] = (flow, gd, np.stack(labels[:2]), np.stack(labels[2:]))
    flow0, gd0, flow_labels0, gd_labels0 = runs[0]
    np.testing.assert_array_equal(np.asarray(flow0.status) == Status.SADDLE, SADDLE_AT)
    np.testing.assert_array_equal(np.asarray(flow0.status) != Status.SADDLE, np.asarray(flow0.status) == 0)
    np.testing.assert_array_equal(np.asarray(gd0.status), np.asarray(flow0.status))
    for k, (flow, gd, flow_labels, gd_labels) in runs.items():
        for a, b in ((flow, flow0), (gd, gd0)):
            np.testing.assert_array_equal(np.asarray(a.status), np.asarray(b.status), err_msg=f"k={k}")
            for name in ("x", "y"):
                np.testing.assert_allclose(np.asarray(a.final[name]), np.asarray(b.final[name]), atol=1e-7)
        # flow: the same steps in θ (the first step is scale-free too), so the same stopping time ×10^−k
        np.testing.assert_allclose(np.asarray(flow.t_final) * 10.0**k, np.asarray(flow0.t_final), rtol=1e-5)
        np.testing.assert_array_equal(np.asarray(gd.t_final), np.asarray(gd0.t_final), err_msg=f"k={k}")
        np.testing.assert_array_equal(flow_labels, flow_labels0, err_msg=f"k={k}")
        np.testing.assert_array_equal(gd_labels, gd_labels0, err_msg=f"k={k}")


CASES = {  # loss, start, status: the higher-order probe at critical points with zero Hessian eigenvalues
    "hyperbola of minima ab = 1": (lambda t, c: 0.5 * c * (t[0] * t[1] - 1) ** 2, [2.0, 0.5], Status.CONVERGED),
    "line of minima a + b = 1": (lambda t, c: c * (t[0] + t[1] - 1) ** 2, [0.35, 0.65], Status.CONVERGED),
    "quartic minimum": (lambda t, c: c * (t[0] ** 4 + t[1] ** 4), [0.0, 0.0], Status.CONVERGED),
    "cubic inflection": (lambda t, c: c * (t[0] ** 3 + t[1] ** 2), [0.0, 0.0], Status.SADDLE),
    "Peano's surface": (lambda t, c: c * (t[1] - t[0] ** 2) * (t[1] - 2 * t[0] ** 2), [0.0, 0.0], Status.SADDLE),
    # a quartic minimum whose basin (|x| < 1/150) lies inside the probe's largest sphere: a minimum all the same
    "small basin": (lambda t, c: c * (t[0] ** 4 - 150 * t[0] ** 5 + t[1] ** 2), [0.0, 0.0], Status.CONVERGED),
    # L falls at fourth order near 0 but rises beyond |x| = 0.01: seen on the smallest sphere only, undecided
    "fall inside a ring": (
        lambda t, c: c * (-(t[0] ** 4) + 1e4 * t[0] ** 6 + t[1] ** 2),
        [0.0, 0.0],
        Status.DEGENERATE,
    ),
}
CASE_LOSSES = tuple(loss for loss, _, _ in CASES.values())


def case_loss(t, d):
    """The loss of case number d["case"] (in the order of CASES) at scale d["c"]."""
    return jax.lax.switch(d["case"].astype(jnp.int32), CASE_LOSSES, t, d["c"])


def case_problem(case, c):
    """The Problem of a case at scale c. The case and the scale are data leaves of one loss function: every case and
    scale runs the same compiled programs (GD, the saddle test, the higher-order probe, the labels)."""
    return popdyn.Problem.from_loss(case_loss, jnp.zeros(2), data={"case": float(list(CASES).index(case)), "c": c})


@pytest.mark.parametrize("c", [1e-10, 1e-3, 1.0, 1e10])
def test_a_saddle_of_small_curvature_is_a_saddle(c):
    """½c(ab − 1)² at a = b = 0: gradient 0, Hessian eigenvalues ±c. A saddle for every c, not a minimum once
    c < saddle_tol (the test is relative to the point's own curvature). The loss is the hyperbola case below."""
    prob = case_problem("hyperbola of minima ab = 1", c)
    traj = popdyn.gradient_descent(prob, jnp.zeros((1, 2)), lr=0.1 / c, steps=1)
    assert int(traj.status[0]) == Status.SADDLE
    assert label_end_points(prob, traj)[1] == ("saddle(1) L=" + f"{0.5 * c:.6g}",)


def test_tiny_or_huge_losses_are_not_steady_at_the_start():
    """At c = 1e-200 ‖∇L‖² underflows and at 1e200 it overflows: the rule must still see a moving point."""
    for c in (1e-200, 1e200):
        prob = popdyn.Problem.from_loss(double_well, {"x": 0.0, "y": 0.0}, data=c)
        traj = popdyn.gradient_descent(prob, {"x": 0.3, "y": 0.5}, lr=0.1 / c, steps=20, record_every=20)
        assert int(traj.status) == Status.MAX_STEPS and float(traj.grad_norm[0]) > 0


X_XOR = jnp.array([[0.0, 0.0], [0.0, 1.0], [1.0, 0.0], [1.0, 1.0]])
Y_XOR = jnp.array([-0.5, 0.5, 0.5, -0.5])


def xor_loss(t, c):
    """2-2-1 tanh network on XOR, c·½·mean squared error: at all-zero weights ∇L = 0, the Hessian is PSD with eight
    zero eigenvalues, and L falls at fourth order (L = c/8 there)."""
    out = jnp.tanh(X_XOR @ t["W1"].T + t["b1"]) @ t["w2"] + t["b2"]
    return c * 0.5 * jnp.mean((out - Y_XOR) ** 2)


@pytest.mark.slow
def test_a_higher_order_saddle_is_not_a_minimum():
    zero = {"W1": jnp.zeros((2, 2)), "b1": jnp.zeros(2), "w2": jnp.zeros(2), "b2": jnp.zeros(())}
    for c in (1e-150, 1.0, 1e150):
        prob = popdyn.Problem.from_loss(xor_loss, zero, data=c)
        traj = popdyn.gradient_descent(prob, jax.tree_util.tree_map(lambda a: a[None], zero), lr=0.1 / c, steps=1)
        assert int(traj.status[0]) == Status.SADDLE, c
        assert label_end_points(prob, traj)[1] == (f"saddle(0) L={0.125 * c:.6g}",)


@pytest.mark.slow  # moved out of the quick tier (< 3 min); still in the full suite
@pytest.mark.parametrize("case", list(CASES))
def test_degenerate_critical_points_are_probed(case):
    _, start, expected = CASES[case]
    for c in (1e-200, 1.0, 1e200):
        prob = case_problem(case, c)
        traj = popdyn.gradient_descent(prob, jnp.asarray([start]), lr=0.1 / c, steps=1)
        assert int(traj.status[0]) == expected, (case, c)
    labels, names = label_end_points(prob, traj)
    assert labels[0] == 0 and names[0].startswith({0: "min", 1: "saddle(0)", 8: "degenerate"}[int(expected)])


@pytest.mark.slow
def test_the_smallest_sphere_first_gives_the_verdicts_of_every_sphere_at_once():
    """The probe searches the larger spheres only where the smallest one shows a fall; its verdicts are those of
    searching all spheres at every point (the rule of docs/dynamics.md), for every case above at c = 1 and for the
    end points of a GD basin map on the hyperbola of minima (all of them flagged)."""
    from popdyn.dynamics import _degenerate as degenerate

    def all_at_once(prob, final, idx):
        d, a = degenerate._falls_at(prob, final, idx, 1e-7, degenerate.RADII)
        saddle, held = np.all(d < -a, axis=1), d[:, -1] >= -a[:, -1]
        return np.where(saddle, int(Status.SADDLE), np.where(held, int(Status.CONVERGED), int(Status.DEGENERATE)))

    for case, (_, start, _) in CASES.items():
        prob = case_problem(case, 1.0)
        final = jnp.asarray([start, start])
        got = degenerate.refine(prob, final, np.zeros(2, int), np.ones(2, bool), 1e-7)
        np.testing.assert_array_equal(got, all_at_once(prob, final, np.arange(2)))
    prob = case_problem("hyperbola of minima ab = 1", 1.0)
    starts = jnp.asarray(np.random.default_rng(0).uniform(0.2, 2.0, size=(64, 2)))
    final = popdyn.gradient_descent(prob, starts, lr=0.1, steps=3000, record_every=3000).final
    got = degenerate.refine(prob, final, np.zeros(64, int), np.ones(64, bool), 1e-7)
    np.testing.assert_array_equal(got, all_at_once(prob, final, np.arange(64)))
    assert np.all(got == int(Status.CONVERGED))


def test_probe_calls_are_sized_by_the_points_to_probe():
    """A few flagged points take a call of their own size, a power of two (at least 8), many take calls of
    ``chunk(n)``."""
    from popdyn.dynamics import _degenerate as degenerate

    assert [degenerate.call_size(2, c) for c in (1, 8, 9, 100, 1024, 5000)] == [8, 8, 16, 128, 1024, 1024]
    assert degenerate.call_size(300, 5000) == degenerate.chunk(300) == 93


@pytest.mark.slow
def test_the_probe_gives_the_same_verdicts_in_calls_of_any_size(monkeypatch):
    """The verdicts of the probe in calls sized by the points (``call_size``) are those of calls of ``chunk(n)``
    points, for every case above at c = 1 and for 64 points on the hyperbola of minima. (D(r) itself is the same bit
    for bit under the command line's guarded XLA, popdyn._xla; unguarded, XLA's YNNPACK reductions change its last
    bits, up to 7e-15 relative, from calls of 128 or 256 points on.)"""
    from popdyn.dynamics import _degenerate as degenerate

    sets = [(case_problem(case, 1.0), jnp.asarray([start, start])) for case, (_, start, _) in CASES.items()]
    hyperbola = np.random.default_rng(0).uniform(0.2, 2.0, size=(64, 1))
    sets.append((case_problem("hyperbola of minima ab = 1", 1.0), jnp.asarray(np.hstack([hyperbola, 1 / hyperbola]))))

    def verdicts():
        return [degenerate.refine(p, f, np.zeros(len(f), int), np.ones(len(f), bool), 1e-7) for p, f in sets]

    sized = verdicts()
    monkeypatch.setattr(degenerate, "call_size", lambda n, count: degenerate.chunk(n))
    for got, expected in zip(sized, verdicts(), strict=True):
        np.testing.assert_array_equal(got, expected)
