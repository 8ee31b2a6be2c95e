"""The ``popdyn`` command: demo, basins, converge, stepsize (DESIGN.md, "The command line").

Every subcommand validates its inputs first, computes, then writes ``summary.json``, ``.npz`` arrays
and ``.png`` figures into ``--out`` atomically. Bad input prints one line ``popdyn: error: …`` and
exits with code 2, leaving nothing behind.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
import warnings
from pathlib import Path

from popdyn import _validate

DEFAULT_OUT = Path("popdyn-out")


def _one_line_warnings():
    def fmt(message, category, *args, **kwargs):
        return f"popdyn: warning: {message}\n"

    warnings.formatwarning = fmt


class _Parser(argparse.ArgumentParser):
    """argparse with the CLI's error contract: a usage error (unknown option, a value of the wrong type, a
    missing argument) is one line ``popdyn: error: …`` on stderr and exit code 2, like every other bad input."""

    def error(self, message: str):
        print(f"popdyn: error: {' '.join(message.split())}", file=sys.stderr)
        raise SystemExit(2)


def _parser() -> argparse.ArgumentParser:
    ap = _Parser(prog="popdyn", description="Exact population dynamics of small transformers.")
    sub = ap.add_subparsers(dest="command", required=True)

    def common(p, task=True):
        if task:
            p.add_argument("task", help="markov | decision-list | scan-snap | scb | teacher")
        p.add_argument("--out", type=Path, default=None, help="output folder (default: popdyn-out/<command>-<task>)")
        p.add_argument("--quiet", action="store_true", help="no progress bars or summary table")
        m = p.add_argument_group("markov")
        m.add_argument("--p", type=float, default=0.1, help="P(next=1 | current=0), in (0,1)")
        m.add_argument("--q", type=float, default=0.1, help="P(next=0 | current=1), in (0,1)")
        dl = p.add_argument_group("decision-list")
        dl.add_argument("--L", type=int, default=10, help="number of tokens")
        dl.add_argument("--n", type=int, default=3, help="sequence length (<= L for distinct tokens)")
        dl.add_argument("--M", type=int, default=None,
                        help="decision-list: longest list, lists of every length 1..M (3); teacher: channels (4)")
        dl.add_argument("--c", type=float, default=None, help="V = cP scale (default: the theorem's)")
        dl.add_argument("--distribution", default="distinct", help="distinct | iid (popdyn's choice, spec §2)")
        sb = p.add_argument_group("scb")
        sb.add_argument("--N", type=int, default=10, help="vocabulary size")
        sb.add_argument("--T", type=int, default=50, help="context length")
        sb.add_argument("--Q", type=int, default=2, help="sparsity: nonzeros per attention column")
        tc = p.add_argument_group("teacher")
        tc.add_argument("--teacher", default="cnn", help="cnn | gcn | sts | gslp")
        tc.add_argument("--D", type=int, default=None, help="tokens (default: the paper's, cnn 36, others 20)")
        tc.add_argument("--K", type=int, default=None, help="support per column of S* (cnn 4, gcn 3, sts 4, gslp 1)")
        tc.add_argument("--activation", default="relu", help="relu | leaky | linear")
        tc.add_argument("--alpha", type=float, default=None, help="leaky slope in [0, 1) (default 0.1)")
        tc.add_argument("--d", type=int, default=4, help="features per token (teacher; M uses --M, default 4)")

    d = sub.add_parser("demo", help="Markov (e,w) basin maps for p+q<1 and p+q>1, convergence table, step-size audit")
    d.add_argument("--out", type=Path, default=None)
    d.add_argument("--quiet", action="store_true")
    d.add_argument("--grid", type=int, default=96, help="grid resolution of the basin maps")

    b = sub.add_parser("basins", help="basin-of-attraction map and fractions over the (w, e) plane")
    common(b)
    b.add_argument("--grid", type=int, default=None, help="points per axis (>= 2; markov 128, decision-list 32)")
    b.add_argument("--range", type=float, nargs=2, default=(-3.0, 3.0), metavar=("LO", "HI"))
    b.add_argument("--method", default="flow", help="flow | gd")
    b.add_argument("--t1", type=float, default=None, help="flow horizon (markov 1e4, decision-list 100)")
    b.add_argument("--lr", type=float, default=0.5, help="GD learning rate")
    b.add_argument("--steps", type=int, default=2000, help="GD steps")
    b.add_argument("--chunk", type=int, default=16384, help="initialisations per compiled chunk")
    b.add_argument("--checkpoint", type=Path, default=None, metavar="DIR",
                   help="save each finished chunk in DIR; rerunning the same command resumes from them")
    b.add_argument("--seed", type=int, default=0, help="scb: the random instance")

    c = sub.add_parser("converge", help="time to reach an ε-ball around the limit vs the local-rate prediction")
    common(c)
    c.add_argument("--n-init", type=int, default=8, help="number of random initialisations")
    c.add_argument("--std", type=float, default=1.0, help="std of the Gaussian initialisations")
    c.add_argument("--seed", type=int, default=0)
    c.add_argument("--eps", type=float, default=None, help="target accuracy (markov 1e-6, scb 0.01)")
    c.add_argument("--lr", type=float, default=None,
                   help="scb: step size of the exact preconditioned GD (0.5); teacher: GD step (1/λ_max at the teacher)")
    c.add_argument("--steps", type=int, default=None, help="teacher: GD steps (default: to ηT = 300 × late onset)")
    c.add_argument("--t1", type=float, default=None, help="flow horizon (markov: 1e4; decision-list: 10× the bound)")
    c.add_argument("--delta", type=float, default=None, help="decision-list: override δ (default: spec §5's)")
    c.add_argument("--gamma", type=float, default=None, help="decision-list: override γ (default: δ/L-type, §5)")

    s = sub.add_parser("stepsize", help="λ_max along GD trajectories against 1/η and 2/η")
    common(s)
    s.add_argument("--e0", type=float, default=1.0)
    s.add_argument("--w0", type=float, default=0.5)
    s.add_argument("--lr", type=float, nargs="+", default=None,
                   help="one or more learning rates (markov: 0.5 2 3; decision-list: one, default 1/λ_max(θ0); "
                        "scb: 0.5 and 0.9, 1.1 times 2/λ* at (P, Qm))")
    s.add_argument("--steps", type=int, default=None, help="GD steps (markov 400, decision-list 20, scb 400)")
    s.add_argument("--seed", type=int, default=0, help="decision-list: lists, π and V0's perturbation; scb: instance")
    r = sub.add_parser("reproduce", help="regenerate a paper figure from exact dynamics (--list)")
    r.add_argument("figure", nargs="?", help="figure name, e.g. markov-fig1")
    r.add_argument("--list", action="store_true", help="list the figures")
    r.add_argument("--out", type=Path, default=None)
    r.add_argument("--quiet", action="store_true")
    return ap


def _out_dir(args, name: str) -> Path:
    return args.out if args.out is not None else DEFAULT_OUT / name


def _check_path(name: str, path: Path) -> None:
    """``path`` must be a directory or creatable as one: neither it nor an existing ancestor may be a file."""
    for p in (path, *path.parents):
        if p.exists():
            if not p.is_dir():
                what = "exists and is not a directory" if p == path else f"lies under the file {str(p)!r}"
                raise ValueError(f"{name}={str(path)!r} is invalid: it {what}")
            return


def _check_task_args(args) -> None:
    from popdyn.tasks.registry import check_task

    check_task(args.task)
    if args.task == "markov":
        _validate.open_unit("p", args.p)
        _validate.open_unit("q", args.q)


class _Terminated(KeyboardInterrupt):
    """SIGTERM, raised like Ctrl-C so both leave through the same clean path."""


def _on_sigterm(signum, frame):
    raise _Terminated


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``popdyn`` console script; returns the exit code.

    Ctrl-C (SIGINT) and SIGTERM stop the job with one line on stderr and exit code 130 / 143: nothing is
    written to ``--out``, and with ``--checkpoint`` the chunks finished so far stay there for a rerun. A
    signal takes effect when the running chunk's computation returns control to Python.
    """
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exc:  # a usage error (one line already printed, code 2) or --help (code 0)
        return exc.code if isinstance(exc.code, int) else 2
    _one_line_warnings()
    in_main_thread = threading.current_thread() is threading.main_thread()  # signals can only be set there
    previous = signal.signal(signal.SIGTERM, _on_sigterm) if in_main_thread else None
    try:
        return _main(args)
    except KeyboardInterrupt as err:
        checkpoint = getattr(args, "checkpoint", None)
        where = f"; finished chunks are in {checkpoint}, run the same command again to resume" if checkpoint else ""
        print(f"popdyn: interrupted{where}", file=sys.stderr)
        return 143 if isinstance(err, _Terminated) else 130
    finally:
        if in_main_thread:
            signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)


def _main(args) -> int:
    """Validate, run the subcommand and print its summary; bad input is one line and exit code 2."""
    import jax

    jax.config.update("jax_enable_x64", True)
    from popdyn.jobs.markov import commands

    try:
        if args.command in ("basins", "converge", "stepsize"):
            _check_task_args(args)
        run = {"demo": commands.demo, "basins": commands.basins, "converge": commands.converge,
               "stepsize": commands.stepsize, "reproduce": commands.reproduce}[args.command]
        name = {"demo": "demo", "reproduce": f"reproduce-{getattr(args, 'figure', None)}"}.get(
            args.command, f"{args.command}-{getattr(args, 'task', '')}")
        out = _out_dir(args, name)
        _check_path("out", out)
        if getattr(args, "checkpoint", None) is not None:
            _check_path("checkpoint", args.checkpoint)
        t0 = time.perf_counter()
        lines = run(args, out)
    except ValueError as err:
        print(f"popdyn: error: {err}", file=sys.stderr)
        return 2
    if not args.quiet:
        print("\n".join(lines))
        print(f"done in {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
