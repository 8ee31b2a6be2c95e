"""The steady rule's Newton distance (docs/dynamics.md, "Stopping rules"): exact on quadratics in its Krylov space,
and a flow whose solver leaves a stiff component at its error tolerance stops within δ of the minimum, not
thousands of times farther."""

import jax.numpy as jnp
import numpy as np
import pytest

import popdyn
from popdyn import Status
from popdyn.dynamics import _stopping as stopping


def _quadratic_field(A):
    return lambda th: {"v": -(A @ th["v"])}


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_effective_curvature_is_the_exact_newton_distance_on_a_plane(seed):
    """On L = ½θᵀAθ in two dimensions the Krylov space is the whole plane: R = ‖f‖/‖A⁻¹f‖ to round-off, for SPD
    and for indefinite A (a saddle's Newton step, by magnitude of the eigenvalues), at scales of A from 1e-150 to
    1e150."""
    rng = np.random.default_rng(seed)
    Q = np.linalg.qr(rng.normal(size=(2, 2)))[0]
    theta = {"v": jnp.asarray(rng.normal(size=2))}
    for eigenvalues in ((1.0, 1e-4), (3.0, 0.5), (2.0, -0.3)):
        for scale in (1e-150, 1.0, 1e150):
            unit = Q @ np.diag(eigenvalues) @ Q.T
            A = scale * unit
            f = -A @ np.asarray(theta["v"])
            along_f = -unit @ np.asarray(theta["v"])  # the sign of fᵀAf, without underflow
            # the Newton step to the critical point, eigenvalues by magnitude
            w, U = np.linalg.eigh(A)
            newton = np.linalg.norm(U @ ((U.T @ f) / np.abs(w)))
            speed, R = stopping.along(_quadratic_field(jnp.asarray(A)), theta)
            assert float(speed) == pytest.approx(np.linalg.norm(f), rel=1e-13)
            if eigenvalues[1] < 0 and float(along_f @ unit @ along_f) <= 0:
                assert float(R) <= 0  # not approaching a critical point along f
            else:
                assert float(speed / R) == pytest.approx(newton, rel=1e-10)


@pytest.mark.parametrize("k", [0, 3, 5])
def test_along_an_eigenvector_the_curvature_is_its_eigenvalue(k):
    """f along an eigenvector of a rotated A (n = 6): R is that eigenvalue, to round-off. The Lanczos residual is
    round-off there, and adds no direction (normalised, it would give a spurious second vector and a wrong R)."""
    rng = np.random.default_rng(k)
    Q = np.linalg.qr(rng.normal(size=(6, 6)))[0]
    lam = np.array([5.0, 2.0, 1.0, 0.5, 1e-3, 7.0])
    A = Q @ np.diag(lam) @ Q.T
    theta = {"v": jnp.asarray(Q[:, k] * 0.7)}
    speed, R = stopping.along(_quadratic_field(jnp.asarray(A)), theta)
    assert float(R) == pytest.approx(lam[k], rel=1e-9)
    assert float(speed) == pytest.approx(0.7 * lam[k], rel=1e-12)


def test_at_a_critical_point_the_rule_holds():
    """f = 0: speed 0, and the rule holds (0 ≤ tol·R and 0 ≤ floor)."""
    A = jnp.diag(jnp.array([1.0, 2.0]))
    speed, R = stopping.along(_quadratic_field(A), {"v": jnp.zeros(2)})
    assert float(speed) == 0.0
    assert bool(stopping.rule(speed, R, jnp.asarray(1e-10), jnp.asarray(0.0)))


def _stiff(th, lam):
    return 0.5 * (th["v"][0] ** 2 + lam * th["v"][1] ** 2) + 0.1 * th["v"][0] ** 4


@pytest.mark.slow  # moved out of the quick tier (< 3 min); still in the full suite
@pytest.mark.parametrize("lam", [1e-3, 1e-4])
def test_a_stiff_component_at_the_solver_tolerance_does_not_stop_the_flow_early(lam):
    """L = ½(x² + λy²) + x⁴/10 from (1, 1): Tsit5 keeps x at its error tolerance (~5e-11) near the minimum, and the
    curvature along f alone, dominated by that stiff component, put the minimum within δ while y was still 3.7e-8
    (λ = 1e-3) or 3.8e-7 (λ = 1e-4) away, stopping the flow at 0.74 or 0.64 of the time y takes to reach δ. The
    flow stops within δ of the minimum, at the time y = e^{−λt} reaches it. λ is a data leaf: both λ run one
    compiled solver."""
    prob = popdyn.Problem.from_loss(_stiff, init={"v": jnp.zeros(2)}, data=lam)
    traj = popdyn.gradient_flow(prob, {"v": jnp.array([1.0, 1.0])}, t1=1e9, ts=None, max_steps=10**6)
    assert int(traj.status) == Status.CONVERGED
    delta = 1e-10  # atol + rtol·‖θ‖ at the minimum θ = 0 (default tolerances)
    assert float(jnp.linalg.norm(traj.final["v"])) <= 1.5 * delta
    expected = np.log(1.0 / delta) / lam
    assert 0.98 * expected <= float(traj.t_final) <= 1.05 * expected


def test_the_rule_is_unchanged_when_the_loss_is_scaled():
    """R scales with L and the speed with it: speed/R (the Newton distance) is the same for c·L, c = 10^k."""
    A = jnp.asarray(np.array([[2.0, 0.3, 0.0], [0.3, 1.0, 0.1], [0.0, 0.1, 1e-3]]))
    theta = {"v": jnp.array([0.2, -0.5, 1.0])}
    ref = stopping.along(_quadratic_field(A), theta)
    for k in (-200, -100, 100, 200):
        c = 10.0**k
        speed, R = stopping.along(_quadratic_field(c * A), theta)
        assert float(speed / R) == pytest.approx(float(ref[0] / ref[1]), rel=1e-12)


@pytest.mark.parametrize("k", [-200, -10, 0, 10, 200])
def test_on_an_invariant_axis_the_distance_is_exact(k):
    """L = c·((x² − 1)²/4 + y²/2) at (0, y): f = (0, −c·y) spans an invariant subspace, the Newton distance is |y|
    for any c = 10^k (a Lanczos residual of pure round-off, normalised, would put a spurious flat direction there)."""
    c = 10.0**k

    def field(th):
        x, y = th["x"], th["y"]
        return {"x": -c * x * (x**2 - 1), "y": -c * y}

    for y in (1.5, 0.3, 1e-4):
        speed, R = stopping.along(field, {"x": jnp.asarray(0.0), "y": jnp.asarray(y)})
        assert float(speed / R) == pytest.approx(y, rel=1e-12)
