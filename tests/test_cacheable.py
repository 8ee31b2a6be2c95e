"""The programs a run compiles can be written to JAX's persistent compilation cache (docs/dynamics.md, "Compiled
programs"): JAX writes no program that holds a host callback, so a flow whose diffrax input checks compiled to
callbacks was compiled again in every process (every test worker, every command). The chunk programs of a tiny
user model's flows and gradient descent hold none; diffrax's checks of popdyn's inputs are traced in equinox's
``nan`` mode, and only they: a user's own checks, and the same diffrax checks outside popdyn's flows, keep
equinox's mode."""

from __future__ import annotations

import re

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import popdyn
from popdyn import _identity as identity

START = np.array([[0.3, 0.5], [1.2, -0.4], [-0.7, 0.1], [0.05, -1.1]])


class _Traced(Exception):
    """Raised once a run's chunk program is captured: nothing is compiled or run."""


@pytest.fixture
def chunk_program(monkeypatch):
    """``chunk_program(run)``: the chunk function and example chunk of the first chunked run that ``run()`` starts
    (``popdyn._identity.run`` sees both before any chunk runs)."""

    def capture(run):
        seen = []

        def record(fn, example, inputs, chunk_size):
            seen.append((fn, example))
            raise _Traced

        with monkeypatch.context() as patch:
            patch.setattr(identity, "run", record)
            with pytest.raises(_Traced):
                run()
        return seen[0]

    return capture


def _callbacks(fn, *args) -> list[str]:
    """The host-callback custom calls of the program ``fn`` lowers to on ``args``."""
    return re.findall(r"custom_call @(\w*callback\w*)", jax.jit(fn).lower(*args).as_text())


def _quartic(th):
    return jnp.sum((th**2 - 1.0) ** 2) + 0.1 * th[0] * th[1]


PROB = popdyn.Problem.from_loss(_quartic, lambda key: jax.random.normal(key, (2,)))

RUNS = {
    "flow records": lambda: popdyn.gradient_flow(PROB, START, 10.0, ts=4),
    "flow target": lambda: popdyn.gradient_flow(PROB, START, 10.0, ts=[0.0, 1.0, 10.0], until=lambda t: t[0] - 0.9),
    "flow lanes": lambda: popdyn.gradient_flow(PROB, START, 10.0, ts=None, lanes=2, lane_steps=8),
    "flow kvaerno5": lambda: popdyn.gradient_flow(PROB, START, 10.0, ts=None, solver="kvaerno5"),
    "gd": lambda: popdyn.gradient_descent(PROB, START, 0.05, 40),
    "gd lanes": lambda: popdyn.gradient_descent(PROB, START, 0.05, 40, lanes=2, lane_steps=8),
}


@pytest.mark.parametrize("name", list(RUNS))
@pytest.mark.slow
def test_chunk_programs_hold_no_host_callback(chunk_program, name):
    fn, example = chunk_program(RUNS[name])
    assert _callbacks(fn, example) == []


@pytest.mark.slow
def test_a_users_own_check_keeps_its_mode(chunk_program):
    """An ``eqx.error_if`` in a user's loss is the user's: inside a flow it still compiles to equinox's default
    check, a host callback that raises."""

    def checked(th):
        return eqx.error_if(_quartic(th), jnp.any(jnp.abs(th) > 1e6), "theta out of range")

    prob = popdyn.Problem.from_loss(checked, lambda key: jax.random.normal(key, (2,)))
    fn, example = chunk_program(lambda: popdyn.gradient_flow(prob, START, 10.0, ts=4))
    assert _callbacks(fn, example) != []


@pytest.mark.slow
def test_diffrax_outside_popdyn_still_checks_its_record_times(chunk_program):
    """After popdyn traced a flow recording at 4 times, a diffeqsolve of the user's with 4 decreasing record times
    (the same traced check, shapes and message) still raises: the ``nan`` mode did not leak."""
    fn, example = chunk_program(RUNS["flow records"])
    jax.jit(fn).lower(example)

    def solve(y0, ts):
        term = diffrax.ODETerm(lambda t, y, args: -y)
        saveat = diffrax.SaveAt(ts=ts)
        return diffrax.diffeqsolve(term, diffrax.Tsit5(), 0.0, 10.0, 0.1, y0, saveat=saveat, throw=False).ys

    with pytest.raises(Exception, match="saveat.ts must be increasing"):
        jax.block_until_ready(solve(jnp.ones(2), jnp.array([0.0, 2.0, 1.0, 10.0])))
