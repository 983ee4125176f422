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
import difflib
import importlib
import os
import re
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from globalstep._errors import GlobalStepError
from globalstep._version import __version__

__all__ = ["main"]

# Modules that register a sub-command, in the order `--help` lists them.
_COMMANDS = (
    "globalstep._demo",
    "globalstep.schedules._explain",
    "globalstep.schedules._plan",
    "globalstep.checkpoint._command",
    "globalstep.summary._logs",
)


_MARKUP = (
    (re.compile(r"``([^`]+)``"), r"\1"),  # ``literal``
    (re.compile(r":[a-z]+:`~?(?:[\w.]+\.)?([^`<]+?)`"), r"\1"),  # :func:`name`
    (re.compile(r"(?m)::$"), ":"),  # a literal block's '::'
)


def plain(text: str) -> str:
    """Strips the reStructuredText markup docstrings use, for help texts.

    Example:
        >>> plain("Runs ``globalstep demo``; see :func:`~globalstep.run.Run`.")
        'Runs globalstep demo; see Run.'
    """
    for pattern, replacement in _MARKUP:
        text = pattern.sub(replacement, text)
    return text


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose sub-commands report their own unknown options, with a
    suggestion, and whose help is plain text."""

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        known, extras = super().parse_known_args(args, namespace)
        if extras and " " in self.prog:  # a sub-command: say it here, with its usage
            self.error(f"unrecognized arguments: {' '.join(extras)}{self._suggest(extras)}")
        return known, extras

    def _suggest(self, extras: list[str]) -> str:
        options = [o for action in self._actions for o in action.option_strings]
        for extra in extras:
            if extra.startswith("--"):
                close = difflib.get_close_matches(extra.partition("=")[0], options, n=1)
                if close:
                    return f" (did you mean {close[0]}?)"
        return ""

    def error(self, message: str) -> NoReturn:
        choice = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
        if choice:
            names = re.findall(r"'([^']*)'", choice[2]) or [n.strip() for n in choice[2].split(",")]
            close = difflib.get_close_matches(choice[1], names, n=1)
            if close:
                message += f"; did you mean {close[0]}?"
        super().error(message)

    def format_help(self) -> str:
        return plain(super().format_help())


def build_parser() -> argparse.ArgumentParser:
    """Returns the parser with every sub-command registered."""
    parser = _Parser(
        prog="globalstep",
        description="The training run's global step, and everything keyed by it.",
    )
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    subparsers: Any = parser.add_subparsers(dest="command", metavar="COMMAND")
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
    argv = sys.argv[1:] if argv is None else list(argv)
    try:  # `schedule`/`plan --import MODULE`: its schedules' options must be known below
        importlib.import_module("globalstep.schedules._cli").import_schedules(argv)
    except GlobalStepError as err:
        print(f"globalstep: error: {err}", file=sys.stderr)
        return 2
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
