"""Paper figures regenerated from exact dynamics (``popdyn reproduce FIGURE``)."""

from popdyn.figures._markov_ewa import markov_ewa
from popdyn.figures._scb_spread import scb_spread
from popdyn.figures.markov import markov_fig1, markov_fig3, markov_fig4
from popdyn.figures.scan_snap import scan_snap_fig4, scan_snap_fig6, scan_snap_fig9
from popdyn.figures.scb import scb_fig1, scb_fig3, scb_fig5
from popdyn.figures.teacher import teacher_heatmaps, teacher_rates

FIGURES = {
    "markov-fig1": (
        markov_fig1,
        "Local to Global Fig 1: (e, w) flows, energy, critical sets, basins for p+q<1 and p+q>1",
    ),
    "markov-fig3": (markov_fig3, "Local to Global Fig 3: rank-one emergence in W_V, W_1 and positional vectors"),
    "markov-fig4": (
        markov_fig4,
        "Local to Global Fig 4: standard vs rank-one initialisation of the full model, p=0.5, q=0.8",
    ),
    "markov-ewa": (
        markov_ewa,
        "(e, w, a) attention-scalar model ([our choice], docs/models/markov.md §2.4): 3-D trajectories, basin slices",
    ),
    "scan-snap-fig4": (scan_snap_fig4, "Scan and Snap Fig 4: Syn-Small attention over training, η_Y = η_Z = 1 vs 10"),
    "scan-snap-fig6": (scan_snap_fig6, "Scan and Snap Fig 6: Syn-Medium entropy over (K, η_Z, η_Y/η_Z) vs the paper"),
    "scan-snap-fig9": (scan_snap_fig9, "Scan and Snap Fig 9: B_n(t) at fixed η_Y/η_Z with the transition times t_0"),
    "scb-fig1": (scb_fig1, "SCB Fig 1: distances to the truth, ℓ1-proximal vs SGD with a large and a small step"),
    "scb-fig3": (scb_fig3, "SCB Fig 3: signals α_V, α_A and the distance Δ to the noise-free population"),
    "scb-spread": (
        scb_spread,
        "SCB: SGD's μ-distance to the population process, predicted (sgd_spread) and measured, against the signal "
        "(N=3, T=4: exact per-example data)",
    ),
    "teacher-rates": (
        teacher_rates,
        "Bilinear teachers: the poster's log-log rates, OOD and cosine for its six settings",
    ),
    "teacher-heatmaps": (teacher_heatmaps, "Bilinear teachers: learned attention S at the end of training vs S*"),
    "scb-fig5": (scb_fig5, "SCB Fig 5: N=100, T=1e5 Gaussian surrogate, Δ for ℓ1-proximal vs SGD (~5 min on 2 cores)"),
}
"""Figure name → (the function that reproduces it at the paper's settings, what it draws): the figures of
``popdyn reproduce FIGURE``, in the order ``popdyn reproduce --list`` names them."""


def get_figure(name: str):
    """The job that reproduces ``name``; ValueError listing the known figures otherwise.

    **Arguments:**

    - ``name``: a key of ``FIGURES``, e.g. ``"markov-fig1"``.
    """
    if name not in FIGURES:
        raise ValueError(f"figure={name!r} is unknown: must be one of {', '.join(FIGURES)} (popdyn reproduce --list)")
    return FIGURES[name][0]


__all__ = [
    "FIGURES",
    "get_figure",
    "markov_ewa",
    "markov_fig1",
    "markov_fig3",
    "markov_fig4",
    "scan_snap_fig4",
    "scan_snap_fig6",
    "scan_snap_fig9",
    "scb_fig1",
    "scb_fig3",
    "scb_fig5",
    "scb_spread",
    "teacher_heatmaps",
    "teacher_rates",
]
