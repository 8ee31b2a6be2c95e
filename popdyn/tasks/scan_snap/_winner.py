"""Which distinct token wins the scan (docs/models/scan_snap.md §5 Theorem 3): Scan and Snap's loss with one attractor
per distinct token l of a class, "l wins", whose residual relu(max_{l'≠l} log c̃_l' − log c̃_l) vanishes where l has the
most attention among the class's distinct tokens (log c̃_l = log P(l|n) + z_ml), and the Theorem 3 tie line of c̃(0)
as an overlay on a 2-D slice.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from popdyn.problem import Overlay, Problem, Theta
from popdyn.tasks.scan_snap._data import distinct_mask
from popdyn.tasks.scan_snap._model import ScanSnap


class TokenWinner(Problem):
    """``prob``'s loss with one attractor per distinct token l of a class: "l wins", residual
    relu(max_{l'≠l} log c̃_l' − log c̃_l) (0 where l has the most attention among them, log c̃_l = log P(l|n) + z_ml),
    and the Theorem 3 tie line y = ``tie`` on the ``axes`` slice. Its numbers are leaves, so a new rate or data
    value reuses the compiled solver; ``token_winner`` builds it from a class.

    **Fields:** ``prob`` the Scan and Snap problem; ``logp`` log P(l|n) on the class's distinct tokens; ``tie`` the
    attention logit y of the tie; ``m`` the class's query token; ``dist`` its distinct tokens (in token order);
    ``axes`` the (x, y) slice the tie line is drawn on."""

    prob: ScanSnap
    logp: Float[Array, " D"]
    tie: Float[Array, ""]
    m: int = eqx.field(static=True)
    dist: tuple[int, ...] = eqx.field(static=True)
    axes: tuple[str, str] = eqx.field(static=True)

    def loss(self, theta: Theta) -> Float[Array, ""]:
        return self.prob.loss(theta)

    def init(self, key: Array) -> Theta:
        return self.prob.init(key)

    def attractors(self) -> dict[str, Callable[[Theta], Float[Array, ""]]]:
        """Attractor name "token l wins" → its residual, for each distinct token l of the class (in token order)."""
        return {f"token {tok} wins": functools.partial(self._residual, i) for i, tok in enumerate(self.dist)}

    def _residual(self, i: int, theta: Theta) -> Float[Array, ""]:
        s = self.logp + theta["Z"][self.m, np.asarray(self.dist)]
        return jax.nn.relu(jnp.max(jnp.where(np.arange(len(self.dist)) == i, -jnp.inf, s)) - s[i])

    def overlays(self, x_axis: str, y_axis: str, x_range: tuple[float, float]) -> list[Overlay]:
        if (x_axis, y_axis) != self.axes:
            return []
        tie = float(self.tie)
        return [
            Overlay(
                "tie of c̃(0) (Theorem 3; exact at x = 0)",
                "line",
                tuple(x_range),
                (tie, tie),
                {"color": "k", "ls": ":", "lw": 1},
            ),
            Overlay("", "points", (0.0,), (tie,), {"color": "k", "marker": "x", "s": 40}),
        ]


def token_winner(prob: ScanSnap, cls: int, axes: tuple[str, str], tie: float) -> TokenWinner:
    """The ``TokenWinner`` problem of class ``cls`` of ``prob``.

    **Arguments:** ``prob`` the Scan and Snap problem; ``cls`` the class whose distinct tokens compete; ``axes`` the
    (x, y) names of the slice to draw the tie line on; ``tie`` the attention logit y where the class's two leading
    distinct tokens tie (Theorem 3: ln(P(l₁|n)/P(l₂|n)) for the logit on l₂)."""
    P = np.asarray(prob.probs)
    dist = np.flatnonzero(distinct_mask(P)[cls])
    logp = jax.device_put(np.log(P[cls, dist]))
    return TokenWinner(prob, logp, jax.device_put(np.asarray(tie)), int(prob.query[cls]), tuple(map(int, dist)), axes)
