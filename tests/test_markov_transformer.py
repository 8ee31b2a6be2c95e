"""The full single-layer transformer (docs/models/markov.md §2.1, §3.3): exact loss, DP, rank-one construction."""

import itertools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from popdyn.exact import Chain, count_dp_loss, expectation
from popdyn.tasks.markov import AttentionScalar, Canonical, Transformer, rank_one_weights

CHAINS = {
    "binary": Chain.binary(0.2, 0.3),
    "3-state": Chain.from_matrix([[0.5, 0.3, 0.2], [0.1, 0.6, 0.3], [0.3, 0.3, 0.4]]),
    "order-2": Chain.binary_order_k([0.1, 0.7, 0.4, 0.9]),
}


def _brute_loss(model, theta):
    """Loop over every sequence in Python: weight × per-position CE (independent of `expectation`); the model's
    log-probabilities of one sequence are one compiled program, called once per sequence."""
    ch = model.chain
    V, N, k = ch.V, model.N, ch.order
    init, kern = np.asarray(ch.init), np.asarray(ch.kernel)
    log_probs = jax.jit(lambda x: jax.nn.log_softmax(model.logits(theta, x)))
    total = 0.0
    for x in itertools.product(range(V), repeat=N):
        ctx = lambda toks: int(sum(t * V ** (len(toks) - 1 - i) for i, t in enumerate(toks)))  # noqa: E731
        w = init[ctx(x[:k])]
        for n in range(k, N):
            w *= kern[ctx(x[n - k : n]), x[n]]
        logp = np.asarray(log_probs(jnp.asarray(x)))
        ce = 0.0
        for n in range(1, N + 1):
            if n >= k:
                nxt = kern[ctx(x[n - k : n])]
            else:
                marg = init.reshape((V,) * k).sum(axis=tuple(range(n + 1, k))) if n + 1 < k else init.reshape((V,) * k)
                j = marg[tuple(x[:n])]
                nxt = j / j.sum()
            ce -= float(np.dot(nxt, logp[n - 1]))
        total += w * ce / N
    return total


@pytest.mark.parametrize("name", list(CHAINS))
def test_loss_equals_python_brute_force(name):
    chain = CHAINS[name]
    model = Transformer(chain, N=4 if chain.V == 3 else 5, d=4, init_std=0.5)
    theta = model.init(jax.random.PRNGKey(3))
    assert abs(float(model.loss(theta)) - _brute_loss(model, theta)) < 1e-12


@pytest.mark.slow
def test_layernorm_and_untied_variants_run_and_differ():
    chain = CHAINS["binary"]
    for kw in ({"layernorm": True}, {"tie": False}):
        m = Transformer(chain, N=5, d=4, init_std=0.5, **kw)
        th = m.init(jax.random.PRNGKey(0))
        assert abs(float(m.loss(th)) - _brute_loss(m, th)) < 1e-12


def _rank_one_loss(full: Transformer, x, alpha):
    """The full model's loss at the rank-one weights of x = (e, w, b, a) along ``alpha``. Jitted, every array here is
    an argument, none a constant: XLA on CPU (jaxlib 0.10.2) can miscompile a dot with a constant all-equal matrix,
    which the default α = 1/√d makes of α·αᵀ (jax.jit(lambda y: jnp.sum(y @ C)) with C = jnp.full((4, 4), 0.175)
    is wrong at y of shape (1024, 10, 4))."""
    return full.loss(rank_one_weights(x[0], x[1], x[2], N=full.N, d=full.d, a=x[3], alpha=alpha))


@eqx.filter_jit
def _rank_one_and_canonical(full: Transformer, canon: Canonical, x, alpha):
    """((L, ∇L) of ``full`` at the rank-one weights of x = (e, w, b), a = 0, (L, ∇L) of ``canon`` at x): one compiled
    program for every x."""

    def L_full(x):
        return _rank_one_loss(full, jnp.append(x, 0.0), alpha)

    def L_canon(x):
        return canon.loss({"e": x[0], "w": x[1], "b": x[2]})

    return jax.value_and_grad(L_full)(x), jax.value_and_grad(L_canon)(x)


@pytest.mark.slow
@pytest.mark.parametrize("e,w,b", [(1.3, -0.4, 0.25), (0.7, 1.1, -0.5), (2.0, -1.5, 1.0)])
def test_rank_one_construction_reproduces_canonical(e, w, b):
    p, q, N, d = 0.5, 0.8, 6, 4
    full = Transformer(Chain.binary(p, q), N=N, d=d)
    canon = Canonical(p, q, bias="trained")
    alpha = jnp.full(d, 1.0 / np.sqrt(d))  # rank_one_weights' default direction
    (L_full, g_full), (L_canon, g_canon) = _rank_one_and_canonical(full, canon, jnp.array([e, w, b]), alpha)
    assert abs(float(L_full) - float(L_canon)) < 1e-12
    np.testing.assert_allclose(np.asarray(g_full), np.asarray(g_canon), atol=1e-10)


def test_dp_equals_enumeration_for_the_attention_scalar_model():
    p, q, N, d = 0.2, 0.3, 10, 4
    full = Transformer(Chain.binary(p, q), N=N, d=d)
    model = AttentionScalar(p, q, N)
    dp_loss, enum_loss = eqx.filter_jit(model.loss), eqx.filter_jit(_rank_one_loss)  # one program each
    alpha = jnp.full(d, 1.0 / np.sqrt(d))  # rank_one_weights' default direction
    for e, w, a, b in [(1.3, -0.4, 0.7, 0.25), (0.5, 0.9, -1.2, -0.3), (1.0, -1.0, 0.0, 0.1)]:
        th = {"e": jnp.asarray(e), "w": jnp.asarray(w), "a": jnp.asarray(a), "b": jnp.asarray(b)}
        dp = float(dp_loss(th))
        enum = float(enum_loss(full, jnp.array([e, w, b, a]), alpha))
        assert abs(dp - enum) < 1e-12
        if a == 0.0:
            canon = Canonical(p, q, bias="trained").loss({k: th[k] for k in ("e", "w", "b")})
            assert abs(dp - float(canon)) < 1e-12


def test_count_dp_against_enumeration_generic_logit():
    chain = Chain.binary(0.35, 0.6)
    f = lambda n, x, s: 0.3 * x - 0.7 * s / n + 0.1 * jnp.sqrt(n) - 0.05 * s * x  # noqa: E731

    def seq(x, P):
        n = jnp.arange(1, x.shape[0] + 1)
        z = f(n, x, jnp.cumsum(x))
        return jnp.mean(-(P[:, 1] * jax.nn.log_sigmoid(z) + P[:, 0] * jax.nn.log_sigmoid(-z)))

    assert abs(float(expectation(seq, chain, 10)) - float(count_dp_loss(chain, 10, f))) < 1e-12
    with pytest.raises(ValueError, match="binary first-order"):
        count_dp_loss(CHAINS["3-state"], 5, f)


@pytest.mark.slow
def test_gradient_matches_finite_differences():
    model = Transformer(CHAINS["order-2"], N=5, d=3, init_std=0.4)
    theta = model.init(jax.random.PRNGKey(5))
    loss = eqx.filter_jit(model.loss)  # one compilation for the 12 perturbed evaluations
    g = jax.jit(jax.grad(model.loss))(theta)
    rng = np.random.default_rng(0)
    for name in ("e", "pos", "W_Q", "W_V", "W_1", "b"):
        idx = tuple(rng.integers(0, s) for s in np.shape(theta[name]))
        h = 1e-5

        def at(delta, name=name, idx=idx):
            th = dict(theta)
            th[name] = theta[name].at[idx].add(delta)
            return float(loss(th))

        fd = (at(h) - at(-h)) / (2 * h)
        assert abs(fd - float(g[name][idx])) < 1e-8


def test_too_long_for_enumeration_names_N():
    with pytest.raises(ValueError, match=r"N=30 is too large .*\(N <= 22 for V = 2\)"):
        Transformer(Chain.binary(0.2, 0.3), N=30, d=4)
    with pytest.raises(ValueError, match="N=0"):
        Transformer(Chain.binary(0.2, 0.3), N=0, d=4)
    with pytest.raises(ValueError, match="probs"):
        Chain.binary_order_k([0.1, 0.2, 0.3])


def test_attention_scalar_profiled_bias_is_the_exact_minimum():
    from scipy.optimize import minimize_scalar

    prof = AttentionScalar(0.2, 0.3, N=10, bias="profiled")
    trained = AttentionScalar(0.2, 0.3, N=10)
    trained_loss, profiled_loss = (
        eqx.filter_jit(trained.loss),
        eqx.filter_jit(prof.loss),
    )  # compiled once, called by Brent
    dL_db = eqx.filter_jit(jax.grad(lambda b, th: trained.loss(dict(th, b=b))))
    for e, w, a in [(1.3, -0.4, 0.7), (0.5, 0.9, -1.2), (2.5, 2.0, 1.5)]:
        th = {"e": jnp.asarray(e), "w": jnp.asarray(w), "a": jnp.asarray(a)}
        res = minimize_scalar(
            lambda b, th=th: float(trained_loss(dict(th, b=jnp.asarray(b)))), bracket=(-5, 5), tol=1e-12
        )
        assert abs(res.fun - float(profiled_loss(th))) < 1e-13  # equal to Brent's minimum up to rounding
        assert abs(float(dL_db(prof.optimal_bias(th), th))) < 1e-13  # ∂L/∂b = 0 at b*
    # a = 0: the canonical profiled model, whose b* is in closed form
    th = {"e": jnp.asarray(1.0), "w": jnp.asarray(-1.0), "a": jnp.asarray(0.0)}
    assert abs(float(prof.loss(th)) - float(Canonical(0.2, 0.3).loss({"e": th["e"], "w": th["w"]}))) < 1e-14


@pytest.mark.slow
def test_attention_scalar_profiled_derivatives_match_finite_differences():
    prof = AttentionScalar(0.2, 0.3, N=10, bias="profiled")
    th = {"e": jnp.asarray(1.3), "w": jnp.asarray(-0.4), "a": jnp.asarray(0.7)}
    loss, grad = (
        eqx.filter_jit(prof.loss),
        eqx.filter_jit(lambda t: jax.grad(prof.loss)(t)),
    )  # compiled once for the 12 perturbed points
    g, H = grad(th), jax.jit(jax.hessian(prof.loss))(th)
    h = 1e-5
    for k in "ewa":
        up, dn = dict(th, **{k: th[k] + h}), dict(th, **{k: th[k] - h})
        assert abs((float(loss(up)) - float(loss(dn))) / (2 * h) - float(g[k])) < 1e-9
        gu, gd = grad(up), grad(dn)
        for kk in "ewa":  # implicit differentiation of b* gives the exact profile Hessian
            assert abs((float(gu[kk]) - float(gd[kk])) / (2 * h) - float(H[k][kk])) < 1e-8
