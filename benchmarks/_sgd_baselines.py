"""The papers' sampled-SGD training loops written in plain NumPy — sampling, forward pass and a hand-written backward
pass, as a researcher without autodiff would write them — the baselines of ``benchmarks.scan_snap`` (the authors'
heavy-ball SGD on the Y/Z model) and ``benchmarks.teacher`` (online SGD on the bilinear student), each with the check
of its backward pass against JAX autodiff; and minibatch SGD on a problem's declared examples (``examples_sgd``), the
baseline of ``benchmarks.device_check``."""

from __future__ import annotations

import math
import time

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks._common import max_relative_difference
from popdyn.tasks.scan_snap import Classes, ScanSnap
from popdyn.tasks.teacher import BilinearTeacher


# ---------------------------------------------------------------------------------------------------------------
# Scan and Snap: the authors' model and training loop
# ---------------------------------------------------------------------------------------------------------------
class NumpyScanSnap:
    """The Y/Z model of Scan and Snap (docs/models/scan_snap.md §2, the authors' ``Model2``) with sampling, forward
    and backward pass in plain NumPy, as a researcher without autodiff would write it. Sequences: ``T − 1``
    contextual tokens."""

    def __init__(self, classes: Classes, T: int):
        self.probs, self.query, self.label = classes.probs, classes.query, classes.label
        self.weights, self.M, self.K, self.T = classes.weights, classes.M, classes.K, T

    def sample(self, rng: np.random.Generator, batch: int) -> tuple[np.ndarray, np.ndarray]:
        """(classes ~ π, contextual tokens i.i.d. P(·|n)), shapes (B,) and (B, T−1)."""
        cls = rng.choice(self.K, size=batch, p=self.weights)
        ctx = np.empty((batch, self.T - 1), dtype=np.int64)
        for k in range(self.K):
            idx = np.flatnonzero(cls == k)
            ctx[idx] = rng.choice(self.M, size=(idx.size, self.T - 1), p=self.probs[k])
        return cls, ctx

    def loss_and_grad(self, Y: np.ndarray, Z: np.ndarray, cls: np.ndarray, ctx: np.ndarray):
        """Batch-mean cross-entropy and its gradient (dY, dZ). Forward: b = softmax_t z_{m, x_t}, a = Σ_t b_t e_{x_t},
        f = a/‖a‖, logits = Yᵀf. Backward: dlogits = (softmax − e_label)/B, dY = f dlogitsᵀ, df = Y dlogits,
        da = (df − f⟨f, df⟩)/‖a‖, db_t = da_{x_t}, ds = b ⊙ (db − ⟨b, db⟩), dZ[m, x_t] += ds_t."""
        B, M = len(cls), self.M
        rows = np.arange(B)[:, None]
        m = self.query[cls]
        s = Z[m[:, None], ctx]
        b = np.exp(s - s.max(1, keepdims=True))
        b /= b.sum(1, keepdims=True)
        a = np.bincount((rows * M + ctx).ravel(), weights=b.ravel(), minlength=B * M).reshape(B, M)
        norm = np.linalg.norm(a, axis=1, keepdims=True)
        f = a / norm
        logits = f @ Y
        top = logits.max(1, keepdims=True)
        p = np.exp(logits - top)
        lse = np.log(p.sum(1, keepdims=True)) + top
        p = np.exp(logits - lse)
        y = self.label[cls]
        loss = float(np.mean(lse[:, 0] - logits[np.arange(B), y]))
        dlogits = p
        dlogits[np.arange(B), y] -= 1.0
        dlogits /= B
        dY = f.T @ dlogits
        df = dlogits @ Y.T
        da = (df - f * np.sum(f * df, 1, keepdims=True)) / norm
        db = np.take_along_axis(da, ctx, axis=1)
        ds = b * (db - np.sum(b * db, 1, keepdims=True))
        dZ = np.bincount((m[:, None] * M + ctx).ravel(), weights=ds.ravel(), minlength=M * M).reshape(M, M)
        return loss, dY, dZ


def scan_snap_sgd(
    model: NumpyScanSnap, steps: int, batch: int, lr: float, scales: dict, momentum: float, seed: int, record_every: int
) -> tuple[dict, float]:
    """The authors' loop: a fresh batch every step, heavy-ball SGD in PyTorch's convention (b ← μb + τ⊙g,
    θ ← θ − ηb, b₀ = 0), from Y = Z = 0. Returns θ every ``record_every`` steps ({"Y", "Z"}: (records, M, M)) and the
    loop's wall seconds."""
    rng = np.random.default_rng(seed)
    Y, Z = np.zeros((model.M, model.M)), np.zeros((model.M, model.M))
    bY, bZ = np.zeros_like(Y), np.zeros_like(Z)
    rec = {"Y": [Y.copy()], "Z": [Z.copy()]}
    t0 = time.perf_counter()
    for step in range(1, steps + 1):
        _, dY, dZ = model.loss_and_grad(Y, Z, *model.sample(rng, batch))
        bY = momentum * bY + scales["Y"] * dY
        bZ = momentum * bZ + scales["Z"] * dZ
        Y, Z = Y - lr * bY, Z - lr * bZ
        if step % record_every == 0:
            rec["Y"].append(Y.copy())
            rec["Z"].append(Z.copy())
    wall = time.perf_counter() - t0
    return {k: np.stack(v) for k, v in rec.items()}, wall


def scan_snap_grad_check(prob: ScanSnap, model: NumpyScanSnap, batch: int, seed: int) -> float:
    """max |NumPy gradient − JAX autodiff gradient of the mean of ``prob.sequence_loss``| on one batch at a random
    point, relative to the largest gradient entry."""
    rng = np.random.default_rng(seed)
    theta = prob.init_uniform(jax.random.PRNGKey(seed))
    cls, ctx = model.sample(rng, batch)
    _, dY, dZ = model.loss_and_grad(np.asarray(theta["Y"]), np.asarray(theta["Z"]), cls, ctx)
    g = jax.grad(lambda th: jnp.mean(jax.vmap(prob.sequence_loss, in_axes=(None, 0, 0))(th, cls, ctx)))(theta)
    return max_relative_difference({"Y": dY, "Z": dZ}, g)


# ---------------------------------------------------------------------------------------------------------------
# Bilinear teacher: the paper's online SGD
# ---------------------------------------------------------------------------------------------------------------
class NumpyTeacher:
    """Teacher data and the position-only student σ(W X S), S = column-softmax(A/√D), with sampling, forward and
    backward pass in plain NumPy (docs/models/teacher.md §1–§2), as a researcher without autodiff would write them."""

    def __init__(self, prob: BilinearTeacher):
        self.S_star, self.V_star = np.asarray(prob.S_star), np.asarray(prob.V_star)
        self.alpha, self.sigma_x, self.sigma_eps = float(prob.alpha), float(prob.sigma_x), float(prob.sigma_eps)
        self.D, self.M, self.d = prob.D, prob.M, prob.d

    def act(self, z: np.ndarray) -> np.ndarray:
        return np.maximum(z, self.alpha * z)

    def sample(self, rng: np.random.Generator, batch: int) -> tuple[np.ndarray, np.ndarray]:
        """(X, Y): X entries N(0, σ_x²), Y = σ(V* X S*) + N(0, σ_ε²) noise."""
        X = self.sigma_x * rng.standard_normal((batch, self.d, self.D))
        Y = self.act(self.V_star @ X @ self.S_star)
        return X, (Y + self.sigma_eps * rng.standard_normal(Y.shape) if self.sigma_eps else Y)

    def loss_and_grad(self, W: np.ndarray, A: np.ndarray, X: np.ndarray, Y: np.ndarray):
        """Batch mean of ½‖Y − σ(W X S)‖² and its gradient (dW, dA). Backward: dU = (σ(U) − Y) ⊙ σ'(U)/B,
        dW = Σ_b dU_b (X_b S)ᵀ, dS = Σ_b (W X_b)ᵀ dU_b, dA[:, j] = (s_j ⊙ dS[:, j] − s_j ⟨s_j, dS[:, j]⟩)/√D."""
        B = len(X)
        logits = A / math.sqrt(self.D)
        S = np.exp(logits - logits.max(0, keepdims=True))
        S /= S.sum(0, keepdims=True)
        WX = W @ X
        U = WX @ S
        R = self.act(U) - Y
        loss = 0.5 * float(np.sum(R * R)) / B
        dU = R * np.where(U > 0, 1.0, self.alpha) / B
        dW = np.einsum("bmj,bdj->md", dU, X @ S)
        dS = np.einsum("bmi,bmj->ij", WX, dU)
        dA = (S * dS - S * np.sum(S * dS, axis=0, keepdims=True)) / math.sqrt(self.D)
        return loss, dW, dA


def teacher_sgd(
    model: NumpyTeacher, theta0: dict, steps: int, batch: int, lr: float, seed: int, records: int
) -> tuple[dict, float]:
    """Online SGD, a fresh batch every step: θ ← θ − η ∇(batch loss). Returns θ at ``records`` + 1 evenly spaced steps
    ({"W", "A"} with a leading record axis) and the loop's wall seconds."""
    rng = np.random.default_rng(seed)
    W, A = np.array(theta0["W"]), np.array(theta0["A"])
    every = steps // records
    rec = {"W": [W.copy()], "A": [A.copy()]}
    t0 = time.perf_counter()
    for step in range(1, steps + 1):
        _, dW, dA = model.loss_and_grad(W, A, *model.sample(rng, batch))
        W, A = W - lr * dW, A - lr * dA
        if step % every == 0:
            rec["W"].append(W.copy())
            rec["A"].append(A.copy())
    wall = time.perf_counter() - t0
    return {k: np.stack(v) for k, v in rec.items()}, wall


def teacher_grad_check(prob: BilinearTeacher, model: NumpyTeacher, theta, batch: int, seed: int) -> float:
    """max |NumPy gradient − JAX autodiff gradient of the batch-mean loss| on one batch at θ, relative to the largest
    gradient entry."""
    X, Y = model.sample(np.random.default_rng(seed), batch)
    _, dW, dA = model.loss_and_grad(np.asarray(theta["W"]), np.asarray(theta["A"]), X, Y)
    g = jax.grad(lambda th: 0.5 * jnp.mean(jnp.sum((Y - prob.student_output(th, X)) ** 2, axis=(-2, -1))))(theta)
    return max_relative_difference({"W": dW, "A": dA}, g)


# ---------------------------------------------------------------------------------------------------------------
# Minibatch SGD on a problem's declared examples: what ``popdyn.sgd`` runs, one run at a time
# ---------------------------------------------------------------------------------------------------------------
def examples_sgd(grad, points: dict, weights: np.ndarray, theta0, lr: float, batch: int, steps: int, seed: int):
    """One run of minibatch SGD drawing B examples a step with replacement by ``weights`` (``rng.choice``) from the
    example table ``points`` (a dict of NumPy arrays, one row per example) and stepping θ ← θ − η ``grad(θ, rows)``,
    ``grad`` the hand-written mean gradient over the drawn rows (a pytree like θ). Returns the final θ."""
    rng = np.random.default_rng(seed)
    n = len(weights)
    theta = jax.tree_util.tree_map(np.array, theta0)
    for _ in range(steps):
        idx = rng.choice(n, size=batch, p=weights)
        g = grad(theta, {k: v[idx] for k, v in points.items()})
        theta = jax.tree_util.tree_map(lambda t, d: t - lr * d, theta, g)
    return theta


def least_squares_grad(theta: np.ndarray, rows: dict) -> np.ndarray:
    """The mean gradient of ℓ(θ, (x, y)) = ½(x·θ − y)² over ``rows`` {"x": (B, d), "y": (B,)}: Xᵀ(Xθ − y)/B."""
    return rows["x"].T @ (rows["x"] @ theta - rows["y"]) / len(rows["y"])


def teacher_examples_grad(model: NumpyTeacher):
    """The mean gradient over drawn rows {"X", "E"} of ``BilinearTeacher.examples()`` of ½‖σ(V*XS*) + E − σ(WXS)‖²:
    ``NumpyTeacher.loss_and_grad`` with the labels Y = σ(V*XS*) + E."""

    def grad(theta: dict, rows: dict) -> dict:
        X = rows["X"]
        Y = model.act(model.V_star @ X @ model.S_star) + rows["E"]
        _, dW, dA = model.loss_and_grad(theta["W"], theta["A"], X, Y)
        return {"W": dW, "A": dA}

    return grad


def examples_grad_check(prob, grad, theta, points: dict, batch: int, seed: int) -> float:
    """``max_relative_difference`` of ``grad`` against JAX autodiff of the mean ``prob.example_loss`` over ``batch``
    random rows of ``points`` at θ."""
    idx = np.random.default_rng(seed).choice(len(next(iter(points.values()))), size=batch)
    rows = {k: v[idx] for k, v in points.items()}
    theta_np = jax.tree_util.tree_map(np.asarray, theta)
    auto = jax.grad(lambda th: jnp.mean(jax.vmap(prob.example_loss, in_axes=(None, 0))(th, rows)))(theta)
    flat = lambda t: np.concatenate([np.ravel(x) for x in jax.tree_util.tree_leaves(t)])  # noqa: E731
    return max_relative_difference({"θ": flat(grad(theta_np, rows))}, {"θ": flat(auto)})
