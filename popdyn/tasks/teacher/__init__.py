"""Bilinear teachers σ(V* X S*) learned by a position-only one-layer transformer (Zhang, Zhao, Gu, Cao 2026;
docs/models/teacher.md)."""

from popdyn.tasks.teacher._kernels import (
    ZERO_INITS,
    entry_loss,
    kappa,
    kfun,
    limit_partials,
    norm_toward,
    zero_partials,
)
from popdyn.tasks.teacher._model import (
    ACTIVATIONS,
    DEFAULT_LEAKY_ALPHA,
    BilinearTeacher,
    resolve_alpha,
    validate_sizes,
    validate_teacher,
)
from popdyn.tasks.teacher._reduced import (
    LateAsymptotes,
    TeacherErrors,
    TeacherReduced,
    embed,
    late_constant,
    project,
)
from popdyn.tasks.teacher.builders import (
    TEACHERS,
    cnn_pooling,
    cycle_gcn,
    group_sparse,
    make_teacher,
    random_V,
    token_selection,
)
from popdyn.tasks.teacher.ood import ood_excess_linear, ood_excess_mc

__all__ = [
    "ACTIVATIONS",
    "DEFAULT_LEAKY_ALPHA",
    "TEACHERS",
    "ZERO_INITS",
    "BilinearTeacher",
    "LateAsymptotes",
    "TeacherErrors",
    "TeacherReduced",
    "cnn_pooling",
    "cycle_gcn",
    "embed",
    "entry_loss",
    "group_sparse",
    "kappa",
    "kfun",
    "late_constant",
    "limit_partials",
    "make_teacher",
    "norm_toward",
    "ood_excess_linear",
    "ood_excess_mc",
    "project",
    "random_V",
    "resolve_alpha",
    "token_selection",
    "validate_sizes",
    "validate_teacher",
    "zero_partials",
]
