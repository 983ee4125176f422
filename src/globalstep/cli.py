"""The ``globalstep`` command line: ``globalstep demo | schedule | plan | ckpt | logs``.

Each sub-command lives beside the code it drives, in a module with an ``add_parser``
function that registers it; this module only wires them. Tests call :func:`main` directly.

Example:
    >>> main(["--version"])  # doctest: +ELLIPSIS
    globalstep ...
    0
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from globalstep._version import __version__
from globalstep.errors import GlobalStepError

__all__ = ["main"]

# Modules that register a sub-command, in the order `--help` lists them.
_COMMANDS = (
    "globalstep.demo",
    "globalstep.schedules.explain",
    "globalstep.schedules.plan",
    "globalstep.checkpoint.command",
    "globalstep.summary.logs",
)


def build_parser() -> argparse.ArgumentParser:
    """Returns the parser with every sub-command registered."""
    parser = argparse.ArgumentParser(
        prog="globalstep",
        description="The training run's global step, and everything keyed by it.",
    )
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in _COMMANDS:
        importlib.import_module(name).add_parser(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command line and returns its exit status.

    Args:
        argv: the arguments, without the program name; defaults to ``sys.argv[1:]``.

    Returns:
        0 on success, 1 when the command reports a problem (a corrupt checkpoint, an
        invalid parameter), 2 for a usage error.
    """
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:
        return int(exit_.code or 0)
    if args.version:
        print(f"globalstep {__version__}")
        return 0
    if args.command is None:
        parser.print_help()
        return 2
    try:
        return int(args.func(args))
    except GlobalStepError as err:
        print(f"globalstep {args.command}: error: {err}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        # The reader went away (`globalstep logs DIR | head`): stop quietly, as Unix tools do,
        # and keep Python from failing again when it flushes standard output at exit.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return 1


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
