"""The CLI reference page, docs/cli.md, generated from the job registry (``popdyn.jobs._registry``).

``render()`` returns the page: the prose below, then one section per job with its description and its option
table, each row built from the job's ``Option`` the way ``popdyn COMMAND TASK --help`` shows it (the flag with
its argparse metavar, the default, the help text). A help text cites a model page's section as plain text,
``docs/models/markov.md §4.4``; the page shows it as a link to that heading, ``[§4.4](models/markov.md#44-…)``,
with the anchor read from the model page, so a citation of a page or a section that does not exist is a
ValueError. ``python -m popdyn.jobs.reference [PATH]`` writes the page (default: docs/cli.md of this
repository); a test holds docs/cli.md equal to ``render()``.

Importing this module loads only the registry and the standard library; ``render()`` also imports
``popdyn.figures`` (for the figures of ``popdyn reproduce``), which loads JAX and matplotlib.
"""

from __future__ import annotations

import re
import sys
import unicodedata
from pathlib import Path

from popdyn.jobs import _registry as registry
from popdyn.jobs._registry import Job, Option

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
PAGE = DOCS / "cli.md"
USER_TASK = "module.path:factory"
"""How the page names the task of a user's own Problem (the registry's ``MODEL``)."""

NONE = "—"
"""The default column of an option without a default."""

INTRO = """\
# CLI reference

```text
popdyn COMMAND TASK [options]
popdyn demo [options]
popdyn reproduce FIGURE [options]
```

`COMMAND` is one of {commands}; `TASK` is one of the built-in tasks {tasks_first},
{tasks_rest}, or your own model as `module.path:factory` (or the name of a
`popdyn.tasks` entry point; see [Jobs and the command line](jobs.md#your-own-model)). Not every task has every
command:

{table}

`popdyn COMMAND TASK --help` prints the same option lists as this page, each with its default. An option that a
job does not declare is refused, and so is an option that applies to one method only when it is given with the
other (`--lr` with `--method flow`). Bad input prints one line, `popdyn: error: …`, exits with code 2 and leaves
nothing behind; Ctrl-C or SIGTERM exits with code 130 or 143, also leaving `--out` as it was.
"""

EVERY_JOB = """\
## Options of every job

| option | meaning |
| --- | --- |
| `--out DIR` | output folder (default `popdyn-out/<command>-<task>`; `popdyn-out/demo`, \
`popdyn-out/reproduce-<figure>`) |
| `--quiet` | no progress bars and no printed summary |
| `--replace` | replace what `--out` holds when it is another command's results |
| `-h`, `--help` | the job's options with their defaults |

Every job writes `summary.json` (inputs, results, versions, devices, wall time), its arrays as `.npz` and its
figures as `.png` into `--out`, atomically ([Jobs and the command line](jobs.md#outputs)).

### Several processes

Jobs that run in chunks (those that mention `--checkpoint` below) also take:

| option | meaning |
| --- | --- |
| `--checkpoint DIR` | save each finished chunk in `DIR`; running the same command again resumes from them |
| `--coordinator HOST:PORT` | process 0's address |
| `--num-processes N` | how many processes run this command |
| `--process-id I` | this process's number, 0..N−1 |

Under SLURM the three process options come from its environment; see [Several processes](distributed.md).
"""

DEMO = """\
## `popdyn demo`

The main job on embedded defaults: Markov (e, w) basin maps for p + q < 1 and p + q > 1 against the closed form,
a convergence-time table against the local rates and a step-size audit, into `popdyn-out/demo/` (about 30 s on a
2-core laptop CPU).

| option | default | meaning |
| --- | --- | --- |
| `--grid GRID` | `96` | grid resolution of the basin maps |
"""

COMMAND_INTROS = {
    "basins": "The attractor each start of a 2-D slice of initialisations reaches, the fractions of each basin with "
    "standard errors, the time to get there, and a map (`basins.npz`, `basins.png`). See "
    "[Basins of attraction](basins.md).",
    "converge": "Convergence or hitting times from random starts, set against the task's theory where it has one.",
    "stepsize": "λ_max(∇²L) along gradient descent, one run per learning rate, against 1/η and 2/η, with a verdict "
    "per run (held, between, edge of stability, diverged).",
    "sweep": "Basin fractions, median stopping times and λ_max over a grid of one or two data parameters (phase "
    "diagrams); the programs compiled for the first parameter value serve all the others.",
    "spread": "How far minibatch SGD strays from GD's path from the same start: E‖θ_SGD − θ_GD‖² and the excess loss "
    "predicted to first order from the exact gradient noise, beside an ensemble of SGD runs that measures them, with "
    "standard errors (`spread.npz`, `spread.png`). See [SGD's gradient noise, exactly](sgd.md).",
}
"""The paragraph under each command's heading, before its jobs."""

REPRODUCE = """\
## `popdyn reproduce`

`popdyn reproduce FIGURE` regenerates a figure of one of the papers from exact dynamics; `popdyn reproduce --list`
names them. It takes only `--out`, `--quiet` and `--replace`.

| figure | what it draws |
| --- | --- |
"""

CHECKPOINT = "Also takes `--checkpoint DIR` and the [several-processes options](#several-processes)."
TABLE_HEAD = "| option | default | meaning |\n| --- | --- | --- |"

DOC_REF = re.compile(r"docs/([\w/-]+\.md)(?: §(\d+(?:\.\d+)*(?: [A-D]\b)?))?")
"""A page cited in a help text and the section it names if any: ``docs/models/decision_lists.md §3 C``."""
HEADING = re.compile(r"^(#{1,6}) (.+?)\s*$", re.M)
FENCE = re.compile(r"^```.*?^```", re.M | re.S)
"""A fenced code block, whose ``#`` lines are not headings."""
SECTION = re.compile(r"§(\d+(?:\.\d+)*)(?: ([A-D])\b)?")
LINK_LIKE = re.compile(r"[^\s`\[]*\[[^\]\n]*\]\([^)\n]*\)")
"""Text that Markdown would read as a link, ``Y[l₂, n₀](0)``: shown as code instead."""


def slug(heading: str) -> str:
    """The anchor MkDocs gives a heading (Python-Markdown's ``toc`` slugify): the text without Markdown escapes,
    reduced to ASCII, without characters other than letters, digits, ``_``, ``-`` and spaces, lower-cased, with
    each run of spaces and hyphens turned into one hyphen: ``§3 C Structured reduction`` →
    ``3-c-structured-reduction``."""
    text = re.sub(r"\\(.)", r"\1", heading)
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def _headings(page: str) -> list[str]:
    """The heading texts of ``docs/<page>``, in order (code blocks skipped); a ValueError when the page does not
    exist."""
    path = DOCS / page
    if not path.is_file():
        raise ValueError(f"docs/{page} does not exist")
    text = FENCE.sub("", path.read_text(encoding="utf-8"))
    return [m.group(2) for m in HEADING.finditer(text)]


def _link(match: re.Match) -> str:
    """The Markdown link of one citation ``docs/<page>.md [§N]``: to the heading numbered §N, its text ``§N``, or
    to the page, its text the page's title. A ValueError when the page or the section does not exist."""
    page, section = match.group(1), match.group(2)
    headings = _headings(page)
    if section is None:
        return f"[{headings[0] if headings else page}]({page})"
    for heading in headings:
        number = SECTION.match(heading)
        if number and " ".join(filter(None, number.groups())) == section:
            return f"[§{section}]({page}#{slug(heading)})"
    raise ValueError(f"docs/{page} has no heading §{section}")


def linked(text: str) -> str:
    """A help text as Markdown: each citation ``docs/<page>.md §N`` a link (``_link``), and text that Markdown
    would read as a link (``Y[l₂, n₀](0)``) shown as code. A ValueError names a citation of a page or a section
    that does not exist, and a § number that names no page before it."""
    text = LINK_LIKE.sub(lambda m: f"`{m.group(0)}`", text)
    out = DOC_REF.sub(_link, text)
    bare = SECTION.search(DOC_REF.sub("", text))
    if bare:
        raise ValueError(f"{text!r} cites §{bare.group(1)} without naming its page (docs/models/<model>.md §N)")
    return out


def _cell(text: str) -> str:
    """Text in a table cell: ``|`` escaped."""
    return text.replace("|", r"\|")


def metavar(option: Option) -> str:
    """The values after an option's flag as argparse's help shows them (``LO HI``, ``LR [LR …]``, ``[NAME=VALUE
    …]``), with the metavar the option declares, else the flag's name in capitals; for an option with choices
    the name too, where argparse writes the choices (the page lists them in the meaning column)."""
    names = option.metavar if option.metavar is not None else option.dest.upper()
    if isinstance(names, tuple):
        return " ".join(names)
    if option.nargs is None:
        return names
    if option.nargs == "?":
        return f"[{names}]"
    if option.nargs == "*":
        return f"[{names} …]"
    if option.nargs == "+":
        return f"{names} [{names} …]"
    return " ".join([names] * int(option.nargs))


def _default(option: Option) -> str:
    """The default column: the default as argparse's help prints it (several values separated by spaces), in
    code, or ``—`` for none."""
    value = option.default
    if value is None or value == ():
        return NONE
    shown = " ".join(map(str, value)) if isinstance(value, (tuple, list)) else str(value)
    return f"`{shown}`"


def _meaning(option: Option) -> str:
    """The meaning column: the help text as Markdown, then the choices and the ``when`` condition."""
    text = linked(option.help)
    if option.choices is not None:
        text += " (one of " + ", ".join(f"`{c}`" for c in option.choices) + ")"
    if option.when is not None:
        text += f" (with {option.when_text('`')} only)"
    return text


def row(option: Option) -> str:
    """One option's row of a job's table: ``| `--p P` | `0.1` | help |``."""
    cells = (f"`{option.flag} {metavar(option)}`", _default(option), _meaning(option))
    return "| " + " | ".join(map(_cell, cells)) + " |"


def _sentence(text: str) -> str:
    """A help text as a sentence: a first ASCII letter in capitals (a symbol such as λ stays as it is), a full
    stop at the end."""
    text = linked(text)
    if text[:1].isascii() and text[:1].isalpha():
        text = text[0].upper() + text[1:]
    return text if text.endswith(".") else text + "."


def task_name(task: str) -> str:
    """A task as the page names it: the registry's user model is ``module.path:factory``."""
    return USER_TASK if task == registry.MODEL else task


def job_section(job: Job) -> str:
    """The section of one job: its heading, its description, the checkpoint line where it takes one, and the
    table of its options."""
    lines = [f"### `popdyn {job.command} {task_name(job.task)}`", "", _sentence(job.help)]
    if job.takes_checkpoint:
        lines.append(CHECKPOINT)
    lines += ["", TABLE_HEAD, *(row(o) for o in job.options)]
    return "\n".join(lines) + "\n"


def _tasks(command: str) -> list[str]:
    """The tasks that have a ``command`` job: the built-in ones in the registry's order, then the user model."""
    return list(registry.tasks_for(command))


def command_section(command: str) -> str:
    """The section of one command: its heading, its introduction, then the section of each of its jobs."""
    intro = COMMAND_INTROS[command]
    forwarding = [task_name(t) for t in _tasks(command) if registry.lookup(command, t).forwards_to is not None]
    if forwarding:
        names = [f"`{t}`" for t in forwarding]
        listed = names[0] if len(names) == 1 else ", ".join(names[:-1]) + f" and {names[-1]}"
        target = registry.lookup(command, forwarding[0]).forwards_to
        intro += (
            f" For {listed} the {command} runs the task's `{target}` job at every point of the grid, with the "
            "same options."
        )
    parts = [f"## `popdyn {command}`\n\n{intro}\n"]
    parts += [job_section(registry.lookup(command, t)) for t in _tasks(command)]
    return "\n".join(parts)


def task_table() -> str:
    """The table of which task has which command, every task of the registry a row."""
    tasks = [t for t in (*registry.TASKS, registry.MODEL) if any(t in _tasks(c) for c in registry.COMMANDS)]
    lines = [
        "| task | " + " | ".join(f"`{c}`" for c in registry.COMMANDS) + " |",
        "| --- |" + " --- |" * len(registry.COMMANDS),
    ]
    for task in tasks:
        marks = ("✓" if task in _tasks(c) else "" for c in registry.COMMANDS)
        lines.append(f"| `{task_name(task)}` | " + " | ".join(marks) + " |")
    return "\n".join(lines)


def intro() -> str:
    """The page's opening: the usage, the commands and tasks, the task × command table and the CLI's
    conventions."""
    tasks = [f"`{t}`" for t in registry.TASKS]
    return INTRO.format(
        commands=", ".join(f"`{c}`" for c in registry.COMMANDS),
        tasks_first=", ".join(tasks[:1]),
        tasks_rest=", ".join(tasks[1:]),
        table=task_table(),
    )


def reproduce_section() -> str:
    """The section of ``popdyn reproduce``: its introduction and the table of the figures it makes
    (``popdyn.figures.FIGURES``; importing it loads JAX and matplotlib)."""
    from popdyn.figures import FIGURES

    rows = (f"| `{name}` | {_cell(linked(text))} |" for name, (_, text) in FIGURES.items())
    return REPRODUCE + "\n".join(rows) + "\n"


def render() -> str:
    """The whole text of docs/cli.md, from the registry, the model pages' headings and the figures."""
    parts = [intro(), EVERY_JOB, DEMO]
    parts += [command_section(c) for c in registry.COMMANDS]
    parts.append(reproduce_section())
    return "\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    """``python -m popdyn.jobs.reference [PATH]``: write ``render()`` to PATH (default: docs/cli.md of this
    repository) and name the file written; returns the exit code (2 for more than one argument)."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) > 1 or any(a.startswith("-") for a in args):
        print("usage: python -m popdyn.jobs.reference [PATH]  (default: docs/cli.md)", file=sys.stderr)
        return 2
    path = Path(args[0]) if args else PAGE
    path.write_text(render(), encoding="utf-8", newline="\n")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
