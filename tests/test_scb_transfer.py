"""Transfer (docs/models/scb.md §6, Thm 4.1): fine-tuning from the source solution skips stage 1 when the
downstream task shares the attention pattern."""

import jax
import numpy as np
import pytest

from popdyn.jobs.scb._transfer import transfer
from popdyn.tasks.scb import Reduced2D, SparseBigram, random_instance


@pytest.mark.slow
def test_shared_attention_skips_stage_1():
    """Q̃m = Qm: the downstream α̃_A is 1 at the source solution, so max(α̃) ≥ 2/(QN) from step 0, and the
    pretrained start reaches ε sooner than the uninformative one."""
    P, Qm = random_instance(jax.random.PRNGKey(0), 8, 12, 2)
    P2, _ = random_instance(jax.random.PRNGKey(1), 8, 12, 2)
    source, target = SparseBigram(P, Qm), SparseBigram(P2, Qm)
    out = transfer(source, target, Q=2, steps=3000, eps=0.05)
    pre, scratch = out.pretrained, out.scratch
    assert pre.alpha0[1] == pytest.approx(1.0, abs=1e-12)
    assert pre.stage1_steps == 0 and scratch.stage1_steps is not None and scratch.stage1_steps > 0
    assert pre.steps_to_eps is not None and scratch.steps_to_eps is not None
    assert pre.steps_to_eps < scratch.steps_to_eps


def test_on_the_target_manifold_the_V_drift_is_order_one():
    """On 𝓜̃ with α_A = 1: g_V = q̄(1 − α_V), an O(1) drift from the first step (§6)."""
    red = Reduced2D.from_instance(SparseBigram(*random_instance(jax.random.PRNGKey(2), 6, 9, 3)))
    for aV in (-0.5, 0.0, 0.3):
        g = red.velocity({"alpha_V": np.float64(aV), "alpha_A": np.float64(1.0)})
        assert float(g["alpha_V"]) == pytest.approx(float(red.qbar) * (1 - aV), rel=1e-13)


def test_transfer_needs_matching_sizes():
    a = SparseBigram(*random_instance(jax.random.PRNGKey(0), 4, 5, 1))
    b = SparseBigram(*random_instance(jax.random.PRNGKey(0), 4, 6, 1))
    with pytest.raises(ValueError, match="target"):
        transfer(a, b, Q=1)
