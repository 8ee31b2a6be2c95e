"""The basin maps of the canonical Markov (e, w) model shared by ``benchmarks.basins_markov`` and
``benchmarks.throughput``: the grid and tolerances, ``timed_basin_map`` (wall seconds and the seconds JAX spent
tracing and compiling within them) and the baseline, a Python loop of ``scipy.integrate.solve_ivp`` on the profiled
vector field written in NumPy from the closed forms (docs/models/markov.md §2.2, §3.2). float64 is switched on by
``benchmarks._common``, which both benchmarks import."""

from __future__ import annotations

import collections
import math
import time

import jax
import jax.monitoring
import numpy as np
from tqdm.auto import tqdm

import popdyn
from popdyn.tasks.markov import W_SADDLE

RTOL, ATOL, T1 = 1e-8, 1e-10, 1e4  # popdyn's gradient_flow defaults, used by basin_map(method="flow")
LABEL_TOL = 1e-3  # basin_map's default ``tol``; also the baseline's classification threshold
LO, HI = -3.0, 3.0


# ---------------------------------------------------------------------------------------------------------------
# JAX compile-time accounting
# ---------------------------------------------------------------------------------------------------------------
_COMPILE_EVENTS = (
    "/jax/core/compile/jaxpr_trace_duration",  # logged only for top-level traces, so no double counting
    "/jax/core/compile/jaxpr_to_mlir_module_duration",
    "/jax/core/compile/backend_compile_duration",
    "/jax/compilation_cache/cache_retrieval_time_sec",
)
_compile_seconds = collections.Counter()


def _on_duration(event: str, duration: float, **kwargs) -> None:
    if event in _COMPILE_EVENTS:
        _compile_seconds[event] += duration


jax.monitoring.register_event_duration_secs_listener(_on_duration)


def timed_basin_map(prob, grid, method, **kw):
    """(BasinMap, wall seconds, seconds JAX spent tracing/lowering/compiling within that wall)."""
    _compile_seconds.clear()
    t0 = time.perf_counter()
    bm = popdyn.basin_map(prob, grid, method=method, **kw)
    jax.block_until_ready(bm.final)
    np.asarray(bm.labels), np.asarray(bm.status)
    wall = time.perf_counter() - t0
    return bm, wall, float(sum(_compile_seconds.values()))


# ---------------------------------------------------------------------------------------------------------------
# Baseline: scipy solve_ivp on the closed-form profiled vector field (docs/models/markov.md §2.2, §3.2)
# ---------------------------------------------------------------------------------------------------------------
class NumpyCanonical:
    """The profiled (e, w) flow of docs/models/markov.md §3.2 in plain NumPy, as a researcher would write it."""

    def __init__(self, p: float, q: float):
        self.p, self.q = p, q
        self.pi0, self.pi1 = q / (p + q), p / (p + q)
        self.A_star = math.log((1 - p) * (1 - q) / (p * q))
        self.pq_sign = p + q - 1.0

    def f0_star(self, A):
        """f0* = ln u, u = positive root of qK u² + (q−p)u − p = 0, K = e^A; the stable form of §2.2 for each
        ordering of p and q, evaluated in log space (logaddexp) so that large |A| does not overflow."""
        p, q = self.p, self.q
        log_4pq = math.log(4 * p * q)
        if p > q:  # u = [(p−q) + sqrt((p−q)² + 4pqK)] / (2qK)
            ld = math.log(p - q)
            log_root = 0.5 * np.logaddexp(2 * ld, log_4pq + A)
            return np.logaddexp(ld, log_root) - math.log(2 * q) - A
        # u = 2p / [(q−p) + sqrt((p−q)² + 4pqK)]
        ld = math.log(q - p) if q > p else -np.inf
        log_root = 0.5 * np.logaddexp(2 * ld, log_4pq + A)
        return math.log(2 * p) - np.logaddexp(ld, log_root)

    def field(self, t, y):
        """θ̇ = −∇L(e, w) with ∂L/∂e = 2e c(w) ℓ'(A), ∂L/∂w = 4|w| e² ℓ'(A), ℓ'(A) = π1(σ(f1*) − (1−q))."""
        e, w = y
        c = 1.0 + 2.0 * w * abs(w)
        A = c * e * e
        f1 = self.f0_star(A) + A
        dl = self.pi1 * (1.0 / (1.0 + np.exp(-f1)) - (1.0 - self.q))
        return np.array([-2.0 * e * c * dl, -4.0 * abs(w) * e * e * dl])

    def steady(self, t, y):
        """Zero when ‖θ̇‖ = atol + rtol‖θ‖ (popdyn's / diffrax's steady-state rule)."""
        return np.linalg.norm(self.field(t, y)) - (ATOL + RTOL * np.linalg.norm(y))

    steady.terminal = True
    steady.direction = -1

    def classify(self, e: float, w: float) -> int:
        """Index into ATTRACTORS of an end point: 0 global, 1 local, 2 saddle, −1 none."""
        c = 1.0 + 2.0 * w * abs(w)
        if abs(c * e * e - self.A_star) < LABEL_TOL:
            return 0
        if abs(e) < LABEL_TOL and self.pq_sign * c > 0:
            return 1
        if math.hypot(e, w - W_SADDLE) < LABEL_TOL:
            return 2
        return -1


def run_baseline(p: float, q: float, e0: np.ndarray, w0: np.ndarray, desc: str):
    """solve_ivp loop; returns (labels, end points, reached-steady flags, n_rhs evaluations, wall seconds)."""
    from scipy.integrate import solve_ivp

    model = NumpyCanonical(p, q)
    labels = np.full(len(e0), -1)
    ends = np.zeros((len(e0), 2))
    steady = np.zeros(len(e0), bool)
    nfev = np.zeros(len(e0), int)
    t0 = time.perf_counter()
    for i in tqdm(range(len(e0)), desc=desc, leave=False):
        sol = solve_ivp(
            model.field, (0.0, T1), [e0[i], w0[i]], method="RK45", rtol=RTOL, atol=ATOL, events=model.steady
        )
        ends[i] = sol.y[:, -1]
        nfev[i] = sol.nfev
        steady[i] = sol.status == 1  # a terminal event fired
        if steady[i]:
            labels[i] = model.classify(*ends[i])
    wall = time.perf_counter() - t0
    return labels, ends, steady, nfev, wall
