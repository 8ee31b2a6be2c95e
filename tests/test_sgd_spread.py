"""SGD's spread around the GD path (``popdyn.sgd_spread``; docs/sgd.md, "SGD's spread around the GD path").

On tiny instances the recursion is checked against a brute force that enumerates every minibatch (all n^B ordered
draws with replacement, all B-subsets without) and propagates the mean and second moment of the linearised offset by
explicit expectation, the cross terms written out; on a linear regression, where the linearisation is exact, against
the exact moments of SGD itself over every sequence of minibatches. Against 8,000 SGD runs on a user's tanh network
and two built-in tasks (the Markov canonical model, a sparse contextual bigram), at three step sizes: the first-order
predictions agree within 3 standard errors at small η, and the gap shrinks with η.
"""

from __future__ import annotations

import itertools
import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree

import popdyn
from popdyn.analysis._spread import SPREAD_MAX_DIM
from popdyn.dynamics._sgd import MinibatchGradient, run_keys
from popdyn.exact import WeightedTable
from popdyn.exact._minibatch import Sampler
from popdyn.tasks.markov import Canonical
from popdyn.tasks.scb import SparseBigram, random_instance

RTOL = 1e-12


def _tanh_net(weights=None, n=4):
    """ℓ(θ, x) = ½(a·tanh(W x) − y)², θ = (W 2×2, a 2): d = 6, n examples in the plane."""
    rng = np.random.default_rng(7)
    points = {"x": rng.standard_normal((n, 2)), "y": rng.standard_normal(n)}
    table = WeightedTable.uniform(points) if weights is None else WeightedTable(points, np.asarray(weights))

    def example_loss(th, ex):
        return 0.5 * (th["a"] @ jnp.tanh(th["W"] @ ex["x"]) - ex["y"]) ** 2

    theta0 = {"W": np.array([[0.3, -0.5], [0.8, 0.2]]), "a": np.array([0.6, -0.9])}
    return popdyn.Problem.from_examples(example_loss, theta0, data=table), theta0


def _regression(weights=None, n=3):
    """ℓ(θ, x) = ½(x·θ − y)², θ ∈ ℝ³: every example's loss is quadratic."""
    rng = np.random.default_rng(3)
    points = {"x": rng.standard_normal((n, 3)), "y": rng.standard_normal(n)}
    table = WeightedTable.uniform(points) if weights is None else WeightedTable(points, np.asarray(weights))

    def example_loss(th, ex):
        return 0.5 * (ex["x"] @ th - ex["y"]) ** 2

    return popdyn.Problem.from_examples(example_loss, np.zeros(3), data=table), np.array([0.4, -1.1, 0.7])


def _minibatches(weights, batch, replace):
    """Every minibatch with its probability: the n^B ordered draws by the weights, or the C(n, B) subsets."""
    n = len(weights)
    if replace:
        return [(b, math.prod(weights[i] for i in b)) for b in itertools.product(range(n), repeat=batch)]
    return [(b, 1.0 / math.comb(n, batch)) for b in itertools.combinations(range(n), batch)]


@eqx.filter_jit
def _per_example(prob, flat):
    """The examples' gradients (n, d) and Hessians (n, d, d) at the flat θ, by jax.grad and jax.hessian of each
    example's loss; the population's ∇L and the third-derivative tensor ∇³L of ``prob.loss``."""
    unravel = ravel_pytree(jax.tree_util.tree_map(lambda t: jnp.zeros(t.shape, t.dtype), prob.template()))[1]
    loss = lambda v, x: prob.example_loss(unravel(v), x)  # noqa: E731
    total = lambda v: prob.loss(unravel(v))  # noqa: E731
    each = lambda f: jax.vmap(f, in_axes=(None, 0))  # noqa: E731
    points = prob.examples().points
    grads, hessians = each(jax.grad(loss))(flat, points), each(jax.hessian(loss))(flat, points)
    return grads, hessians, jax.grad(total)(flat), jax.jacfwd(jax.hessian(total))(flat)


def _brute_force(prob, theta0, lr, batch, steps, replace):
    """Per step t: (tr C_t, ∇L·m_t + ½ tr(H C_t), m_t), and C at the end, by explicit expectation over every
    minibatch of the linearised offset δ ← (I − ηĤ_b)δ − η(ĝ_b − ∇L), its mean μ and second moment S with the cross
    terms kept; the drift m ← (I − ηH)m − (η/2) ∇³L[S] from the third-derivative tensor."""
    data = prob.examples()
    w = np.asarray(data.weights)
    flat = ravel_pytree(jax.tree_util.tree_map(jnp.asarray, theta0))[0]
    d = flat.shape[0]
    mu, S, m, out = np.zeros(d), np.zeros((d, d)), np.zeros(d), []
    for t in range(steps + 1):
        G, Hs, gradient, third = (np.asarray(a) for a in _per_example(prob, flat))
        grad, H = w @ G, np.einsum("i,iab->ab", w, Hs)
        out.append((np.trace(S), grad @ m + 0.5 * np.sum(H * S), m.copy()))
        if t == steps:
            return out, S
        mu_next, S_next = np.zeros(d), np.zeros((d, d))
        for b, prob_b in _minibatches(w, batch, replace):
            A = np.eye(d) - lr * Hs[list(b)].mean(axis=0)
            u = G[list(b)].mean(axis=0) - grad
            mu_next += prob_b * (A @ mu - lr * u)
            cross = np.outer(A @ mu, u)
            S_next += prob_b * (A @ S @ A.T - lr * (cross + cross.T) + lr**2 * np.outer(u, u))
        assert np.linalg.norm(mu_next) <= 1e-14 * math.sqrt(np.trace(S_next)), "the linearised offset has mean 0"
        m = m - lr * H @ m - 0.5 * lr * np.einsum("kab,ab->k", third, S)
        mu, S, flat = mu_next, S_next, flat - lr * gradient
    raise AssertionError("unreachable")


def _close(got, expected, rtol=RTOL):
    got, expected = np.asarray(got), np.asarray(expected)
    assert np.max(np.abs(got - expected)) <= rtol * np.max(np.abs(expected)), (got, expected)


@pytest.mark.parametrize(
    "weights, batch, replace",
    [([0.4, 0.3, 0.2, 0.1], 2, True), ([0.4, 0.3, 0.2, 0.1], 1, None), (None, 2, False)],
    ids=["with-replacement", "online", "without-replacement"],
)
def test_recursion_matches_every_minibatch_enumerated(weights, batch, replace):
    prob, theta0 = _tanh_net(weights)
    lr, steps = 0.3, 4
    found = popdyn.sgd_spread(prob, theta0, lr=lr, batch=batch, steps=steps, replace=replace, top=2)
    records, C = _brute_force(prob, theta0, lr, batch, steps, replace is not False)
    _close(found.expected_sq_distance, [r[0] for r in records])
    _close(found.expected_excess_loss, [r[1] for r in records])
    _close(found.mean_offset, np.stack([r[2] for r in records]))
    _close(found.covariance, C)
    lam, U = np.linalg.eigh(C)
    _close(found.top.values, lam[::-1][:2])
    assert np.allclose(np.abs(np.sum(found.top.vectors * U[:, ::-1][:, :2], axis=0)), 1.0, rtol=0, atol=1e-10)
    assert found.factor == popdyn.analysis.minibatch_factor(batch, replace, prob.examples().n)
    traj = popdyn.gradient_descent(prob, theta0, lr=lr, steps=steps, save_params=True)
    for a, b in zip(jax.tree_util.tree_leaves(found.path), jax.tree_util.tree_leaves(traj.params), strict=True):
        _close(a, b)
    _close(found.loss, traj.loss)


def _sgd_moments(prob, theta0, lr, batch, steps, replace):
    """Per step: E[δ], E[δδᵀ] and E L(θ_SGD) − L(θ_GD) of least-squares SGD itself, δ = θ_SGD − θ_GD, over every
    sequence of minibatches with its probability (NumPy, the step written out)."""
    data = prob.examples()
    X, y, w = (np.asarray(a) for a in (data.points["x"], data.points["y"], data.weights))
    batches = _minibatches(w, batch, replace is not False)
    runs, probs, gd, out = np.asarray(theta0)[None], np.ones(1), np.asarray(theta0), []
    for t in range(steps + 1):
        delta = runs - gd
        step = delta @ X.T  # L(θ_GD + δ) − L(θ_GD) = Σ_i w_i [r_i (x_i·δ) + ½ (x_i·δ)²], r the GD residuals
        excess = (step * (X @ gd - y) + 0.5 * step**2) @ w
        out.append((probs @ delta, np.einsum("r,ra,rb->ab", probs, delta, delta), probs @ excess))
        if t == steps:
            return out
        grads = [(runs @ X[list(b)].T - y[list(b)]) @ X[list(b)] / batch for b, _ in batches]
        runs = np.concatenate([runs - lr * g for g in grads])
        probs = np.concatenate([p * probs for _, p in batches])
        gd = gd - lr * (w * (X @ gd - y)) @ X
    raise AssertionError("unreachable")


@pytest.mark.parametrize(
    "weights, batch, replace, lr",
    [([0.5, 0.3, 0.2], 2, True, 0.4), ([0.2, 0.5, 0.3], 1, True, 0.7), (None, 2, False, 0.5)],
    ids=["with-replacement", "one-example", "without-replacement"],
)
def test_linear_regression_spread_is_sgds_exact_second_moment(weights, batch, replace, lr):
    """Every example's loss is quadratic: the offset follows the linear recursion exactly, with mean 0, at any η."""
    prob, theta0 = _regression(weights)
    steps = 5
    found = popdyn.sgd_spread(prob, theta0, lr=lr, batch=batch, steps=steps, replace=replace)
    exact = _sgd_moments(prob, theta0, lr, batch, steps, replace)
    _close(found.expected_sq_distance, [np.trace(S) for _, S, _ in exact])
    _close(found.covariance, exact[-1][1])
    _close(found.expected_excess_loss, [excess for *_, excess in exact])
    scale = math.sqrt(found.expected_sq_distance[-1])
    assert np.max(np.abs(found.mean_offset)) <= RTOL * scale
    assert max(np.linalg.norm(mean) for mean, *_ in exact) <= RTOL * scale


def _no_examples():
    return popdyn.Problem.from_loss(lambda th: jnp.sum(th**2), np.zeros(2)), np.zeros(2)


@pytest.mark.validation
@pytest.mark.parametrize(
    "make, changes, match",
    [
        (_tanh_net, {"batch": 0}, r"batch=0 is out of range: must be an integer >= 1"),
        (_tanh_net, {"batch": -2}, r"batch=-2 is out of range"),
        (_tanh_net, {"batch": 1.5}, r"batch=1\.5 is out of range"),
        (_tanh_net, {"batch": None}, r"batch=None is out of range"),
        (_tanh_net, {"batch": 5, "replace": False}, r"batch=5 is out of range: without replacement .*\[1, 4\]"),
        (lambda: _tanh_net([0.4, 0.3, 0.2, 0.1]), {"replace": False}, r"replace=False needs n = 4 equally weighted"),
        (_tanh_net, {"replace": "no"}, r"replace='no' is invalid"),
        (_no_examples, {}, r"FunctionProblem declares no per-example data"),
        (_tanh_net, {"steps": 0}, r"steps=0 is out of range: must be an integer >= 1"),
        (_tanh_net, {"steps": 5, "record_every": 2}, r"steps=5 is invalid: must be a multiple of record_every=2"),
        (_tanh_net, {"record_every": 0}, r"record_every=0 is out of range"),
        (_tanh_net, {"lr": 0.0}, r"lr=0\.0 is out of range: must be a finite number in \(0, inf\)"),
        (_tanh_net, {"lr": float("nan")}, r"lr=nan is out of range"),
        (_tanh_net, {"top": 7}, r"top=7 is out of range: must be an integer in \[0, d\] = \[0, 6\]"),
        (_tanh_net, {"top": -1}, r"top=-1 is out of range"),
    ],
)
def test_bad_input_is_refused_naming_the_parameter(make, changes, match):
    prob, theta0 = make()
    settings = {"lr": 0.1, "batch": 2, "steps": 4} | changes
    with pytest.raises(ValueError, match=match):
        popdyn.sgd_spread(prob, theta0, **settings)


@pytest.mark.validation
def test_a_batch_of_starts_and_too_many_parameters_are_refused():
    prob, theta0 = _tanh_net()
    batched = jax.tree_util.tree_map(lambda a: np.stack([a, a]), theta0)
    with pytest.raises(ValueError, match=r"theta0 has a batch axis: sgd_spread takes one unbatched θ"):
        popdyn.sgd_spread(prob, batched, lr=0.1, batch=2, steps=4)
    d = SPREAD_MAX_DIM + 1
    table = WeightedTable.uniform({"x": np.ones((2, d))})
    wide = popdyn.Problem.from_examples(lambda th, x: jnp.sum((th - x["x"]) ** 2), np.zeros(d), data=table)
    with pytest.raises(ValueError, match=rf"theta0 has d = {d} parameters: sgd_spread takes at most SPREAD_MAX_DIM"):
        popdyn.sgd_spread(wide, np.zeros(d), lr=0.1, batch=1, steps=4)


# ---- against SGD's runs ----------------------------------------------------------------------------------------


@eqx.filter_jit
def _linearised(prob, hook, path, lr, keys):
    """The linearised offset δ ← δ − η(ĝ_B(θ_t) − ∇L(θ_t)) − η Ĥ_B(θ_t) δ along GD's path θ_t (``path``, flat, one row
    per step), one per key, on the minibatches of ``popdyn.sgd``'s run of that key: step i's comes from its gradient
    hook with the first half of split(fold_in(key, i)), as GradientDescent hands it; beside it, that run's own
    θ ← θ − η ĝ_B(θ), which must end where ``popdyn.sgd``'s run does. Returns (θ_SGD, δ) at the end, one row per key."""
    unravel = ravel_pytree(jax.tree_util.tree_map(lambda t: jnp.zeros(t.shape, t.dtype), prob.template()))[1]
    minibatch = lambda v, key: ravel_pytree(hook(unravel(v), key))[0]  # noqa: E731
    grads = jax.vmap(jax.grad(lambda v: prob.loss(unravel(v))))(path[:-1])

    def run(key):
        def step(carry, xs):
            theta, offset = carry
            gd, g, i = xs
            draw = jax.random.split(jax.random.fold_in(key, i))[0]
            noisy, curved = jax.jvp(lambda v: minibatch(v, draw), (gd,), (offset,))
            return (theta - lr * minibatch(theta, draw), offset - lr * (noisy - g) - lr * curved), None

        steps = jnp.arange(path.shape[0] - 1)
        return jax.lax.scan(step, (path[0], jnp.zeros_like(path[0])), (path[:-1], grads, steps))[0]

    return jax.vmap(run)(keys)


def _runs(prob, found, runs, seed):
    """``runs`` runs of ``popdyn.sgd`` with ``found``'s settings from GD's θ_0, and the linearised offsets on their
    minibatches: (θ_SGD − θ_GD, δ) at the end, one row per run."""
    flat = jax.vmap(lambda th: ravel_pytree(th)[0])
    path = flat(found.path)
    theta0 = jax.tree_util.tree_map(lambda a: a[0], found.path)
    settings = {"lr": found.lr, "batch": found.batch, "replace": bool(found.replace), "steps": int(found.ts[-1])}
    # params recorded: every run takes all its steps (none stops early in a lane)
    traj = popdyn.sgd(prob, theta0, **settings, seeds=runs, seed=seed, save_params=True)
    assert np.all(np.asarray(traj.status) != int(popdyn.Status.DIVERGED)), traj.status_counts()
    hook = MinibatchGradient(prob, Sampler.of(prob.examples(), found.batch, bool(found.replace)))
    keys = run_keys(seed, 1, runs)
    theta, offset = _linearised(prob, hook, path, jnp.asarray(found.lr), keys)
    final = np.asarray(flat(traj.final))
    _close(theta, final)  # the offsets rode popdyn.sgd's minibatches
    return final - np.asarray(path[-1]), np.asarray(offset)


def _mean_se(a):
    return float(np.mean(a)), float(np.std(a, ddof=1) / math.sqrt(a.size))


def _generic(prob, seed=3):
    """A generic start: the template's shapes filled with N(0, 0.7²), as tests/test_task_examples.py draws them."""
    rng = np.random.default_rng(seed)
    return prob, jax.tree_util.tree_map(lambda t: 0.7 * rng.standard_normal(t.shape), prob.template())


SLOW = pytest.mark.slow  # ensembles of 8,000 runs: the full tier (the brute-force checks above are quick)


@pytest.mark.parametrize(
    "make, batch, replace, steps, lrs",
    [
        pytest.param(_tanh_net, 2, False, 20, (0.2, 0.1, 0.05), marks=SLOW),
        pytest.param(
            lambda: _generic(Canonical(0.2, 0.35, bias="trained", N=5)), 2, True, 20, (0.2, 0.1, 0.05), marks=SLOW
        ),
        pytest.param(
            lambda: _generic(SparseBigram(*random_instance(0, N=3, T=2, Q=2))),
            4,
            True,
            60,
            (0.1, 0.05, 0.025),
            marks=SLOW,
        ),
    ],
    ids=["tanh-net", "markov-canonical", "sparse-bigram"],
)
def test_spread_agrees_with_sgd_runs_and_its_gap_shrinks_with_the_step(make, batch, replace, steps, lrs):
    """8,000 SGD runs per step size η (largest first), each with the linearised offset δ_lin beside it on the same
    minibatches (E‖δ_lin‖² = tr C_t exactly, at every η).

    - E‖δ_lin‖² within 3 standard errors of tr C at every η.
    - The relative gap E[‖δ‖² − ‖δ_lin‖²] / tr C (paired runs: a small standard error) is resolved at the largest η,
      and at the smallest, with 3 standard errors, below half of it.
    - At the smallest η: E‖θ_SGD − θ_GD‖² within 3 standard errors of tr C; the excess loss E L(θ_SGD) − L(θ_GD),
      estimated with the control variate ∇L·δ_lin (mean 0), within 3 of ``expected_excess_loss``, and ½ tr(HC) alone
      (without the drift term ∇L·m) more than 3 off; the mean offset within 4 of ``mean_offset`` in every coordinate.
    """
    prob, theta0 = make()
    unravel = ravel_pytree(jax.tree_util.tree_map(jnp.asarray, theta0))[1]
    total = lambda v: prob.loss(unravel(v))  # noqa: E731
    gaps = []
    for lr in lrs:
        found = popdyn.sgd_spread(prob, theta0, lr=lr, batch=batch, steps=steps, replace=replace)
        delta, linear = _runs(prob, found, 8000, seed=11)
        trace = found.expected_sq_distance[-1]
        sq, sq_linear = np.sum(delta**2, axis=1), np.sum(linear**2, axis=1)
        mean, se = _mean_se(sq_linear)
        assert abs(mean - trace) <= 3 * se, (lr, mean, trace, se)
        gaps.append(_mean_se((sq - sq_linear) / trace))
    (first, first_se), (last, last_se) = gaps[0], gaps[-1]
    assert abs(first) > 3 * first_se, gaps
    assert abs(last) + 3 * last_se < abs(first) / 2, gaps
    mean, se = _mean_se(sq)
    assert abs(mean - trace) <= 3 * se, (mean, trace, se)
    end = ravel_pytree(jax.tree_util.tree_map(lambda a: a[-1], found.path))[0]
    grad, hessian = (np.asarray(f(total)(end)) for f in (jax.grad, jax.hessian))
    mean, se = _mean_se(np.asarray(jax.jit(jax.vmap(total))(end + delta)) - found.loss[-1] - linear @ grad)
    assert abs(mean - found.expected_excess_loss[-1]) <= 3 * se, (mean, found.expected_excess_loss[-1], se)
    curvature_only = 0.5 * np.sum(hessian * found.covariance)
    assert abs(mean - curvature_only) > 3 * se, (mean, curvature_only, se)
    offset, offset_se = delta.mean(axis=0), delta.std(axis=0, ddof=1) / math.sqrt(len(delta))
    assert np.all(np.abs(offset - found.mean_offset[-1]) <= 4 * offset_se), (offset, found.mean_offset[-1], offset_se)


@SLOW  # two ensembles of 3,000 runs compiled: ~20 s
def test_measured_spread_is_the_ensembles_mean_and_meets_the_exact_prediction():
    """``measured_spread`` on the regression, where first order is exact at every η: its E‖θ_SGD − θ_GD‖² and excess
    loss are the sample means over ``popdyn.sgd``'s own runs (recorded θ and loss), with standard errors s/√S, and
    every record is within 4 standard errors of ``sgd_spread``'s tr C_t and ½ tr(H C_t)."""
    prob, theta0 = _regression(n=4)
    found = popdyn.sgd_spread(prob, theta0, lr=0.15, batch=2, steps=12, replace=False, record_every=3)
    m = popdyn.measured_spread(prob, found, runs=3000, seed=4)
    traj = popdyn.sgd(prob, theta0, lr=0.15, batch=2, steps=12, seeds=3000, replace=False, seed=4,
                      record_every=3, save_params=True)  # fmt: skip
    sq = np.sum((np.asarray(traj.params) - np.asarray(found.path)[None]) ** 2, axis=-1)
    excess = np.asarray(traj.loss) - found.loss[None]
    for got, se, runs in ((m.sq_distance, m.sq_distance_stderr, sq), (m.excess_loss, m.excess_loss_stderr, excess)):
        _close(got, runs.mean(axis=0))
        _close(se, runs.std(axis=0, ddof=1) / math.sqrt(3000))
    np.testing.assert_array_equal(m.ts, found.ts)
    assert m.runs == 3000 and m.all_steps == 3000 and np.isnan(m.z[0]) and m.sq_distance[0] == 0.0
    assert np.all(np.abs(m.z[1:]) <= 4), m.z
    gap = np.abs(m.excess_loss[1:] - found.expected_excess_loss[1:])
    assert np.all(gap <= 4 * m.excess_loss_stderr[1:]), (m.excess_loss, found.expected_excess_loss)


@pytest.mark.validation
def test_measured_spread_refuses_what_it_cannot_measure():
    prob, theta0 = _regression()
    found = popdyn.sgd_spread(prob, theta0, lr=0.1, batch=1, steps=2)
    with pytest.raises(ValueError, match="runs=1 is out of range"):
        popdyn.measured_spread(prob, found, runs=1)
    with pytest.raises(ValueError, match="predicted=3 is invalid: must be popdyn.sgd_spread's record"):
        popdyn.measured_spread(prob, 3, runs=10)
