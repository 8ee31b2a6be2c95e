"""The ``popdyn`` command: demo, basins, converge, stepsize, sweep, spread, reproduce, generated from the job registry
(``popdyn.jobs._registry``; docs/jobs.md).

Every subcommand validates its inputs first, computes, then writes ``summary.json``, ``.npz`` arrays
and ``.png`` figures into ``--out`` atomically. Bad input prints one line ``popdyn: error: …`` and
exits with code 2, leaving nothing behind.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import re
import signal
import stat
import sys
import threading
import time
import warnings
from pathlib import Path

from popdyn import _xla

DEFAULT_OUT = Path("popdyn-out")


_CACHE_ERROR = re.compile(r"Error (reading|writing) persistent compilation cache entry")


def _one_line_warnings():
    """Warnings as one line ``popdyn: warning: …``; JAX's warnings about compilation cache entries it cannot read
    or write (one per program) become a single line."""
    said: list[str] = []

    def fmt(message, category, *args, **kwargs):
        if _CACHE_ERROR.match(str(message)):
            if said:
                return ""
            said.append(str(message))
            return f"popdyn: warning: {' '.join(str(message).split())} (further such warnings are not shown)\n"
        return f"popdyn: warning: {' '.join(str(message).split())}\n"

    warnings.formatwarning = fmt


class _Parser(argparse.ArgumentParser):
    """argparse with the CLI's error contract: a usage error (unknown option, a value of the wrong type, a
    missing argument) is one line ``popdyn: error: …`` on stderr and exit code 2, like every other bad input."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # a value such as -1e3 or -inf is a number, not an option (argparse knows only -1 and -1.5)
        self._negative_number_matcher = re.compile(r"^-(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$|^-(inf|nan)$", re.I)

    def error(self, message: str):
        bad = re.match(r"argument TASK: invalid choice: '(.*?)'", message)
        if bad:  # name the job registry's tasks for this command, and the user-model form
            from popdyn.jobs._registry import tasks_for

            command = self.prog.split()[-1]
            message = (
                f"task={bad.group(1)!r} has no {command} job: available for {', '.join(tasks_for(command))}, "
                "or your own model as module.path:factory"
            )
        print(f"popdyn: error: {' '.join(message.split())}", file=sys.stderr)
        raise SystemExit(2)


def _folder(text: str) -> Path:
    """An --out or --checkpoint value: a non-empty path."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"{text!r} is invalid: must name a folder")
    return Path(text)


def _add_job(tsub, job) -> None:
    """The subparser of one (command, task) job: its own options only, each with its default and range."""
    p = tsub.add_parser(job.task, help=job.help, description=job.help)
    p.add_argument("--out", type=_folder, default=None, help=f"output folder (default: {DEFAULT_OUT}/<command>-<task>)")
    p.add_argument("--quiet", action="store_true", help="no progress bars or summary table")
    p.add_argument("--replace", action="store_true", help="replace what --out holds (another command's results)")
    if job.takes_checkpoint:
        p.add_argument(
            "--checkpoint",
            type=_folder,
            default=None,
            metavar="DIR",
            help="save each finished chunk in DIR; rerunning the same command resumes from them",
        )
        g = p.add_argument_group("several processes (docs/distributed.md)")
        g.add_argument("--coordinator", default=None, metavar="HOST:PORT", help="process 0's address")
        g.add_argument("--num-processes", type=int, default=None, metavar="N", help="how many processes run this")
        g.add_argument("--process-id", type=int, default=None, metavar="I", help="this process's number, 0..N-1")
    for o in job.options:
        extend = o.nargs in ("*", "+")
        p.add_argument(
            o.flag,
            type=o.type,
            default=None,
            help=o.help_text(),
            nargs=o.nargs,
            choices=o.choices,
            metavar=o.metavar,
            action="extend" if extend else "store",
        )


def _parser() -> argparse.ArgumentParser:
    from popdyn.jobs._registry import COMMANDS, REGISTRY, tasks_for

    ap = _Parser(prog="popdyn", description="Exact population dynamics of small transformers.")
    sub = ap.add_subparsers(dest="command", required=True, parser_class=_Parser)

    d = sub.add_parser("demo", help="Markov (e,w) basin maps for p+q<1 and p+q>1, convergence table, step-size audit")
    d.add_argument("--out", type=_folder, default=None)
    d.add_argument("--quiet", action="store_true")
    d.add_argument("--replace", action="store_true", help="replace what --out holds")
    d.add_argument("--grid", type=int, default=96, help="grid resolution of the basin maps (default 96)")

    about = {
        "basins": "basin-of-attraction map and fractions",
        "converge": "convergence and hitting times against the theory",
        "stepsize": "λ_max along GD against 1/η and 2/η",
        "sweep": "phase diagrams over data parameters: basin fractions, times and λ_max",
        "spread": "SGD's spread around the GD path: predicted to first order against measured runs",
    }
    for command in COMMANDS:
        cp = sub.add_parser(
            command,
            help=about[command],
            description=about[command] + ". TASK is a built-in task "
            "or your own model as module.path:factory (see `popdyn " + command + " model --help`).",
        )
        tsub = cp.add_subparsers(dest="task", required=True, metavar="TASK", parser_class=_Parser)
        for task in tasks_for(command):
            _add_job(tsub, REGISTRY[(command, task)])

    r = sub.add_parser("reproduce", help="regenerate a paper figure from exact dynamics (--list)")
    r.add_argument("figure", nargs="?", help="figure name, e.g. markov-fig1")
    r.add_argument("--list", action="store_true", help="list the figures")
    r.add_argument("--out", type=_folder, default=None)
    r.add_argument("--quiet", action="store_true")
    r.add_argument("--replace", action="store_true", help="replace what --out holds")
    return ap


def _user_task(argv: list[str]) -> list[str]:
    """``COMMAND module.path:factory …`` (or a ``popdyn.tasks`` entry point's name) → ``COMMAND model --factory …``."""
    from popdyn.jobs._registry import COMMANDS, MODEL, REGISTRY

    if len(argv) < 2 or argv[0] not in COMMANDS or (argv[0], argv[1]) in REGISTRY:
        return argv
    spec = argv[1]
    if ":" not in spec:
        from importlib.metadata import entry_points

        found = [ep.value for ep in entry_points(group="popdyn.tasks") if ep.name == spec]
        if not found:
            return argv
        spec = found[0]
    return [argv[0], MODEL, "--factory", spec, *argv[2:]]


def _out_dir(args, name: str) -> Path:
    return args.out if args.out is not None else DEFAULT_OUT / name


def _prepare_outputs(args, out: Path, held: contextlib.ExitStack, writer: bool) -> Path:
    """Before computing: --out (each demo part's folder) can take this command's results, --checkpoint is a
    folder that neither holds --out nor lies inside it (popdyn.io.prepare_out; docs/jobs.md, "Outputs"). The
    process that writes (``writer``: process 0 of several) locks both for the run (``held``: released when it
    closes). Returns the folder to write into."""
    from popdyn.io import check_folder, lock, prepare_out

    checkpoint = getattr(args, "checkpoint", None)
    if checkpoint is not None:
        real = [check_folder(name, p).resolve() for name, p in (("out", out), ("checkpoint", checkpoint))]
        if real[0] == real[1] or real[1].is_relative_to(real[0]) or real[0].is_relative_to(real[1]):
            raise ValueError(
                f"checkpoint={str(checkpoint)!r} overlaps out={str(out)!r}: a run replaces its --out and its "
                "checkpoint must outlive it; choose folders apart"
            )
    if not writer:
        return check_folder("out", out)
    out = held.enter_context(lock("out", out))
    if checkpoint is not None:
        args.checkpoint = held.enter_context(lock("checkpoint", checkpoint))
    if args.command == "demo":
        from popdyn.jobs._demo import PARTS

        for name, command in PARTS:
            prepare_out(out / name, command, "markov", args.replace)
        return out
    task = getattr(args, "factory", None) or getattr(args, "task", None) or getattr(args, "figure", None)
    return prepare_out(out, args.command, task, args.replace)


def _compilation_cache() -> None:
    """JAX's persistent compilation cache in a per-user folder, so a second run of a command compiles nothing:
    ``$POPDYN_CACHE_DIR``, else ``$XDG_CACHE_HOME/popdyn/jax`` (``~/.cache/popdyn/jax``); ``POPDYN_CACHE_DIR=off``
    turns it off (docs/jobs.md, "A fast command line"). A folder that every user may write to and another user
    owns is refused (ValueError): its programs would be theirs. A folder that cannot be made or written to gives
    one warning, and the run goes on without the cache."""
    import jax

    where = os.environ.get("POPDYN_CACHE_DIR")
    if where is not None and where.lower() in ("off", "0", "none", ""):
        return
    if where is None:
        where = str(Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "popdyn" / "jax")
    folder = Path(where).resolve()  # one key per folder: JAX puts the path into every program's cache key
    try:
        folder.mkdir(parents=True, exist_ok=True)
        info = folder.stat()
    except OSError as err:
        reason = err.strerror or err
        warnings.warn(f"compilation cache {where} is unusable ({reason}); running without it", stacklevel=2)
        return
    if info.st_mode & stat.S_IWOTH and info.st_uid != os.getuid():
        raise ValueError(
            f"POPDYN_CACHE_DIR={where!r} is refused: every user may write to that folder and another user owns it, "
            "so anyone could put there the programs this run would execute; use a folder of your own, or "
            "POPDYN_CACHE_DIR=off"
        )
    if not os.access(folder, os.W_OK | os.X_OK):
        warnings.warn(f"compilation cache {where} is not writable; running without it", stacklevel=2)
        return
    jax.config.update("jax_compilation_cache_dir", str(folder))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)


def _interrupted(args, signum: int | None = None) -> int:
    """Print the one line of an interrupted run and return its exit code: 128 + the signal's number."""
    checkpoint = getattr(args, "checkpoint", None)
    where = f"; finished chunks are in {checkpoint}, run the same command again to resume" if checkpoint else ""
    print(f"popdyn: interrupted{where}", file=sys.stderr, flush=True)
    return 128 + (signum or signal.SIGINT)


def _stop(args, signum, frame):
    """SIGINT/SIGTERM handler: remove what is being written, print one line and end the process at once.

    Ending with ``os._exit`` rather than an exception is what makes every moment safe: an exception raised
    inside JAX's tracing, a garbage-collector callback or a compile can be swallowed (the run then goes on and
    exits 0) or leave the runtime half torn down (a crash at exit). Nothing is imported here: the signal may
    arrive in the middle of an import, and importing then fails on the import lock."""
    io = sys.modules.get("popdyn.io")  # not imported yet: nothing is being written
    if io is not None:
        io.discard_partial()
    sys.stdout.flush()
    code = _interrupted(args, signum)
    distributed = sys.modules.get("popdyn.distributed")
    if distributed is not None:  # in a run of several processes: the others learn of the stop before this one leaves
        distributed.announce_stop(signum or signal.SIGINT)
        distributed.leave(LEAVE_S)
    os._exit(code)


def _prepare_everywhere(args, held: contextlib.ExitStack, wait: int | None) -> Path:
    """``_prepare_outputs`` on this process; in a run of several processes (``wait``: seconds to wait for each
    other, else None), then the pre-flight check that they all run the same command and none refused its outputs
    (popdyn.distributed.preflight). Returns --out."""
    from popdyn import distributed

    out = _out_dir(args, _out_name(args))
    if wait is None:
        return _prepare_outputs(args, out, held, True)
    try:
        out, refused = _prepare_outputs(args, out, held, distributed.process_id() == 0), None
    except ValueError as err:  # raised by the pre-flight check, once every process knows to stop
        refused = err
    settings = {k: str(v) for k, v in sorted(vars(args).items()) if k not in _LOCAL}
    distributed.preflight(settings, refused, wait)
    return out


def _handle_signals(args) -> dict:
    """Make SIGINT and SIGTERM call ``_stop`` (in the main thread only: handlers can only be set there); returns
    the handlers they replace."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    return {s: signal.signal(s, functools.partial(_stop, args)) for s in (signal.SIGINT, signal.SIGTERM)}


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``popdyn`` console script; returns the exit code.

    Ctrl-C (SIGINT) and SIGTERM stop the job with one line on stderr and exit code 130 / 143: nothing is
    written to ``--out``, and with ``--checkpoint`` the chunks finished so far stay there for a rerun. A
    signal takes effect as soon as the running computation returns control to Python (docs/jobs.md,
    "Interrupts").
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    args = argparse.Namespace()  # filled in by parsing; the handler reads --checkpoint from it
    previous = _handle_signals(args)
    try:
        try:
            _parser().parse_args(_user_task(argv), namespace=args)
        except SystemExit as exc:  # a usage error (one line already printed, code 2) or --help (code 0)
            return exc.code if isinstance(exc.code, int) else 2
        _one_line_warnings()
        return _main(args)
    except KeyboardInterrupt:  # raised by the job itself (or Ctrl-C where no handler could be set)
        return _interrupted(args)
    finally:
        for s, handler in previous.items():
            signal.signal(s, signal.SIG_DFL if handler is None else handler)


_LOCAL = ("out", "checkpoint", "quiet", "replace", "coordinator", "process_id")
"""Options that may differ between the processes of one run: the others must be equal on every process."""


def _main(args) -> int:
    """Validate, run the subcommand and print its summary; bad input is one line and exit code 2."""
    _xla.guard_xla()  # before JAX starts: XLA reads its flags once
    import jax

    from popdyn import distributed

    jax.config.update("jax_enable_x64", True)
    try:
        _compilation_cache()
        processes = {k: getattr(args, k, None) for k in ("coordinator", "num_processes", "process_id")}
        several = any(v is not None for v in processes.values())
        wait = _connect_timeout() if several else None
        if wait is not None:
            with _deadline(wait, f"the processes did not all join within POPDYN_CONNECT_TIMEOUT={wait} s"):
                distributed.initialize(**processes, timeout_s=wait + 30)  # the deadline first
            _handle_signals(args)  # JAX's runtime sets a SIGTERM handler of its own
            _watch_signals(args)
        with contextlib.ExitStack() as held:
            out = _prepare_everywhere(args, held, wait)
            t0 = time.perf_counter()
            lines = _run(args, out)
    except ValueError as err:
        print(f"popdyn: error: {err}", file=sys.stderr)
        return 2
    if not args.quiet:
        print("\n".join(lines))
        print(f"done in {time.perf_counter() - t0:.1f} s")
    return 0


def _connect_timeout() -> int:
    """``$POPDYN_CONNECT_TIMEOUT``: the seconds the processes of a run wait for each other (default 300)."""
    text = os.environ.get("POPDYN_CONNECT_TIMEOUT", "300")
    if not (text.strip().isdigit() and int(text) >= 1):
        raise ValueError(f"POPDYN_CONNECT_TIMEOUT={text!r} is invalid: must be a whole number of seconds >= 1")
    return int(text)


GRACE_S = 2.0
"""Seconds a signal waits for the main thread before another thread ends the process (``_watch_signals``)."""

POLL_S = 0.2
"""Seconds between two looks for a stop announced by another process of the run (``_watch_signals``)."""

LEAVE_S = 5 * GRACE_S
"""Seconds a stopping process waits for the others to leave with it (``popdyn.distributed.leave``): each learns of
the stop within ``POLL_S`` and stops within ``GRACE_S`` more, on a loaded machine later."""


def _watch_signals(args) -> None:
    """In a run of several processes, a thread of its own: when this process receives SIGINT or SIGTERM, it tells the
    others (``popdyn.distributed.announce_stop``); when another process announces one, it sends this process the
    same signal, so a signal to any one process stops them all, each with the one line and the exit code of that
    signal. When the main thread has not handled the signal within ``GRACE_S`` seconds, the thread ends the process
    itself (``_stop``): the main thread is then waiting inside JAX's runtime for a process that has already stopped,
    and would not return to Python before the runtime's heartbeat timeout."""
    import select

    from popdyn import distributed, io

    if threading.current_thread() is not threading.main_thread():  # the wake-up descriptor is set there only
        return
    read, write = os.pipe()
    os.set_blocking(write, False)
    signal.set_wakeup_fd(write)  # Python writes the number of every signal it catches here

    def watch():
        while not select.select([read], [], [], POLL_S)[0]:
            announced = distributed.stop_signal()
            if announced is not None:
                os.kill(os.getpid(), announced)  # read back from the descriptor on the next turn
        signum = os.read(read, 1)[0]
        distributed.announce_stop(signum)
        time.sleep(GRACE_S)
        with io.MOVING:  # results that are moving into place finish first
            _stop(args, signum, None)

    threading.Thread(target=watch, daemon=True, name="popdyn-signals").start()


@contextlib.contextmanager
def _deadline(seconds: float, message: str):
    """End the process with ``popdyn: error: message`` and exit code 2 if the block runs longer than ``seconds``:
    for waits inside JAX's runtime, which ends the process itself (SIGABRT, a native stack trace) when they fail."""

    def expire():
        print(f"popdyn: error: {message}", file=sys.stderr, flush=True)
        os._exit(2)

    timer = threading.Timer(seconds, expire)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


def _out_name(args) -> str:
    if args.command == "demo":
        return "demo"
    if args.command == "reproduce":
        return f"reproduce-{args.figure}"
    task = args.factory.split(":")[-1] if getattr(args, "factory", None) else args.task
    return f"{args.command}-{task}"


def _run(args, out: Path) -> list[str]:
    """Run the job ``args`` names and write its Result into ``out``; return its summary lines."""
    if args.command == "demo":
        from popdyn.jobs._demo import demo

        return demo(out, args.grid, progress=not args.quiet)
    if args.command == "reproduce":
        from popdyn.figures import FIGURES, get_figure

        if args.list or args.figure is None:
            return [f"{name:<14s} {text}" for name, (_, text) in FIGURES.items()]
        job, kwargs = get_figure(args.figure), {"progress": not args.quiet}
    else:
        from popdyn.jobs._registry import lookup

        spec = lookup(args.command, args.task)
        kwargs = spec.keywords(vars(args), progress=not args.quiet, checkpoint=getattr(args, "checkpoint", None))
        job = spec.function()
    t0 = time.perf_counter()
    from popdyn.io import produce

    res = produce(lambda: job(**kwargs))
    from popdyn.distributed import is_writer

    if is_writer():  # with several processes, process 0 alone writes (every process holds the whole result)
        res.write(out, args.command, time.perf_counter() - t0)
    return res.lines


if __name__ == "__main__":
    sys.exit(main())
