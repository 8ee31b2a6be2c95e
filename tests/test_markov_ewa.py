"""``popdyn reproduce markov-ewa``: the (e, w, a) model's slices, checked against the adaptive flow."""

import numpy as np
import pytest

from popdyn.dynamics import Status, gradient_flow
from popdyn.figures._markov_ewa import loss_classes, markov_ewa
from popdyn.tasks.markov import AttentionScalar

pytestmark = pytest.mark.slow  # every test here runs end-to-end jobs or large instances


def test_ewa_slices_agree_with_the_flow():
    res = markov_ewa(n=6, steps=3000, n_traj=2, progress=False)
    assert res.lines[0].startswith("markov-ewa") and "markov-ewa" in res.figures
    for tag, (p, q) in (("pq_lt_1", (0.1, 0.1)), ("pq_gt_1", (0.9, 0.9))):
        r = res.results[tag]
        for s in r["slices"].values():
            assert abs(sum(s["fractions"].values()) - 1) < 1e-12
            assert sum(s["status"].values()) == 36
        prob = AttentionScalar(p, q, N=4)
        arr = res.arrays[f"ewa_{tag}_a2"]  # the a0 = 1 slice
        # both attractors are reached from this slice, and each label survives an independent check:
        # the adaptive gradient flow (diffrax) from the same initialisations ends in the same class
        picks = [np.flatnonzero(arr["class"].ravel() == k)[:2] for k in (0, 1)]
        assert all(len(ix) for ix in picks), "both the global minimum and the unigram plateau must appear"
        ix = np.concatenate(picks)
        W, E = np.meshgrid(arr["w"], arr["e"])
        theta = {"e": E.ravel()[ix], "w": W.ravel()[ix], "a": np.ones(len(ix)), "b": np.zeros(len(ix))}
        flow = gradient_flow(prob, theta, t1=1e4)
        gap = (np.asarray(flow.final_loss) - prob.entropy_rate()) / (prob.unigram_loss() - prob.entropy_rate())
        assert np.all(np.asarray(flow.status) != Status.NAN)
        np.testing.assert_array_equal(loss_classes(gap), arr["class"].ravel()[ix])
