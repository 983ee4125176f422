"""Command-line plumbing shared by ``globalstep schedule`` and ``globalstep plan``.

A schedule is named (``exponential_decay``) with its parameters as options in the
dataclass's own names (``--initial 0.1 --decay-steps 100000 --rate 0.96 --staircase``),
or given as a JSON file of ``to_config()`` (``--config schedule.json``). A composite
(``warmup``, ``scale``, ``clip``, ``join``) takes its parts after ``--then``, each a name
with its own parameters, last on the command line::

    globalstep schedule warmup --steps 100 --then cosine_decay --initial 0.1 --decay-steps 900
    globalstep schedule join --boundaries 100 --then constant --value 0.1 \
        --then linear --start 0.1 --end 0 --steps 900

A schedule of your own is named the same way once its module is imported:
``--import my_schedules`` (a module on the path or in the current directory) imports it
before the command line is read (:func:`import_schedules`).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from globalstep._errors import ConfigError
from globalstep.schedules._base import Schedule, fields_of, from_config, registered

__all__ = ["add_schedule_arguments", "import_schedules", "schedule_from_args"]

_OWN_OPTIONS = (
    "The command's own options (--at, --explain, --plot, ...) go before the first --then."
)
# Composites and the field that holds their parts.
_COMPOSITES = {"warmup": "schedule", "scale": "schedule", "clip": "schedule", "join": "schedules"}

_BOOLS = {"true": True, "yes": True, "1": True, "false": False, "no": False, "0": False}
_TUPLES = ("boundaries", "levels")


def _parameters() -> list[str]:
    names: set[str] = set()
    for cls in registered().values():
        for spec in fields_of(cls):
            value_type = str(spec.type)
            if "Schedule" not in value_type:
                names.add(spec.name)
    return sorted(names)


def import_schedules(argv: Sequence[str]) -> list[str]:
    """Imports the modules that ``--import MODULE`` names in ``argv`` (before any
    ``--then``), so that the schedules they register are known when the command line's
    options are made; returns their names. The current directory is searched too.

    Raises:
        ConfigError: a module that cannot be imported (its error is named).
    """
    names: list[str] = []
    tokens = list(argv)
    for i, token in enumerate(tokens):
        if token == "--then":
            break
        if token == "--import" and i + 1 < len(tokens):
            names.append(tokens[i + 1])
        elif token.startswith("--import="):
            names.append(token.partition("=")[2])
    here = os.getcwd()
    added = bool(names) and here not in sys.path
    if added:
        sys.path.append(here)
    try:
        for name in names:
            try:
                importlib.import_module(name)
            except Exception as err:  # its own error, whatever it is, named in ours
                raise ConfigError(
                    "--import",
                    f"must name a module Python can import ({type(err).__name__}: {err})",
                    name,
                ) from err
    finally:
        if added:
            sys.path.remove(here)
    return names


def add_schedule_arguments(
    parser: argparse.ArgumentParser, *, positional: bool, skip: tuple[str, ...] = ()
) -> None:
    """Adds the schedule name (positional or ``--schedule``), ``--config`` and every parameter."""
    core = sorted(n for n in registered() if n not in _COMPOSITES)  # a user's too
    help_name = f"a schedule: {', '.join(core)}"
    if positional:
        parser.add_argument("name", nargs="?", metavar="NAME", help=help_name)
    else:
        parser.add_argument("--schedule", dest="name", metavar="NAME", help=help_name)
    parser.add_argument("--config", metavar="FILE", help="a schedule's to_config() as JSON")
    parser.add_argument(
        "--import",
        dest="imports",
        action="append",
        metavar="MODULE",
        help="a module of your own schedules to import first (repeatable)",
    )
    parser.add_argument(
        "--then",
        nargs=argparse.REMAINDER,
        metavar="NAME ...",
        help="a composite's part (warmup, scale, clip: one; join: one per interval), "
        "a name with its parameters; last on the line, repeatable",
    )
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = _parameters_help(core)
    group = parser.add_argument_group("schedule parameters (as in the schedule's dataclass)")
    for name in _parameters():
        if name in skip:
            continue
        try:
            group.add_argument(
                f"--{name.replace('_', '-')}",
                dest=f"param_{name}",
                nargs="?",
                const="true",
                metavar="VALUE",
                help=argparse.SUPPRESS,
            )
        except argparse.ArgumentError:
            # A field named as one of the command's own options (a user's schedule with an
            # `every` field, and `plan --every`): given in --config there.
            continue


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _required(cls: type[Schedule]) -> list[str]:
    """The fields of ``cls`` that have no default."""
    return [
        f.name
        for f in fields_of(cls)
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    ]


def _parameters_help(names: list[str]) -> str:
    """One line per schedule: its required parameters, then its optional ones in brackets."""
    lines = ["schedules and their parameters (--name VALUE; a bare --staircase means true):"]
    for name in names:
        cls = registered()[name]
        required = _required(cls)
        optional = [_flag(f.name) for f in fields_of(cls) if f.name not in required]
        extra = f" [{' '.join(optional)}]" if optional else ""
        lines.append(f"  {name}: {' '.join(_flag(r) for r in required)}{extra}")
    for name, parts in (
        ("warmup", "--steps N [--start-value V] [--shape linear|cosine|exponential]"),
        ("scale", "--factor F"),
        ("clip", "[--low L] [--high H]"),
        ("join", "--boundaries B1,B2,..."),
    ):
        lines.append(f"  {name}: {parts} --then NAME ...{' --then NAME ...' * (name == 'join')}")
    lines.append(
        "lists (--boundaries, --levels) are comma-separated; lengths are steps, or durations "
        "('3ep') where the run is known (plan, or --steps-per-epoch)"
    )
    return "\n".join(lines)


def _number(text: str) -> Any:
    for convert in (int, float):
        try:
            return convert(text)
        except ValueError:
            pass
    return text


def _value(name: str, text: str, cls: type[Schedule]) -> Any:
    spec = {f.name: f for f in fields_of(cls)}[name]
    if "bool" in str(spec.type) and "float" not in str(spec.type):
        if text.lower() not in _BOOLS:
            raise ConfigError(name, "must be true or false", text)
        return _BOOLS[text.lower()]
    if name in _TUPLES:
        return tuple(_number(part.strip()) for part in text.split(",") if part.strip())
    if text.lower() == "none":
        return None
    if "float" in str(spec.type) and "int" not in str(spec.type):
        try:
            return float(text)
        except ValueError:
            return text
    return _number(text)


def schedule_from_args(args: argparse.Namespace, total_steps: int | None) -> Schedule | None:
    """Builds the schedule the arguments describe, or None if they name none.

    A schedule with a ``total_steps`` parameter left out gets the run's ``total_steps``.

    Raises:
        ConfigError: an unknown name, a parameter the schedule does not take, a bad value,
            or a config file that cannot be read.
    """
    given = {
        key.removeprefix("param_"): value
        for key, value in vars(args).items()
        if key.startswith("param_") and value is not None
    }
    if args.config is not None:
        if args.name is not None or given:
            raise ConfigError(
                "config", "must be given alone, without a schedule name or parameters", args.config
            )
        try:
            config = json.loads(Path(args.config).read_text())
        except (OSError, ValueError) as err:
            raise ConfigError(
                "config", f"must be a readable JSON file ({err})", args.config
            ) from err
        return from_config(config)
    if args.name is None:
        if given:
            raise ConfigError("schedule", "must be named when parameters are given", None)
        return None
    parts = _parts(getattr(args, "then", None) or [])
    return _build(args.name, given, parts, total_steps)


def _parts(tokens: list[str]) -> list[tuple[str, dict[str, str]]]:
    """Splits the ``--then`` tokens into (name, {parameter: text}) parts.

    Example:
        >>> _parts(["warmup", "--steps", "10", "--then", "constant", "--value=2"])
        [('warmup', {'steps': '10'}), ('constant', {'value': '2'})]
    """
    parts: list[tuple[str, dict[str, str]]] = []
    i = 0
    while i < len(tokens):
        token = tokens[i]
        i += 1
        if token == "--then":
            continue
        if not token.startswith("--"):
            parts.append((token, {}))
            continue
        if not parts:
            raise ConfigError("then", "must be followed by a schedule name", token)
        key, equals, value = token[2:].partition("=")
        if not equals:
            has_value = i < len(tokens) and not tokens[i].startswith("--")
            value = tokens[i] if has_value else "true"
            i += has_value
        parts[-1][1][key.replace("-", "_")] = value
    return parts


def _build(
    name: str,
    given: dict[str, str],
    parts: list[tuple[str, dict[str, str]]],
    total_steps: int | None,
    *,
    part: bool = False,
) -> Schedule:
    classes = registered()
    if name not in classes:
        raise ConfigError(
            "schedule",
            f"must be one of {', '.join(classes)}",
            name,
            hint="A schedule of your own: --import the module that defines it.",
        )
    cls = classes[name]
    accepted = {f.name for f in fields_of(cls)} - {"schedule", "schedules"}
    unknown = sorted(set(given) - accepted)
    if unknown:
        raise ConfigError(
            "schedule",
            f"{name} takes {', '.join(map(_flag, sorted(accepted)))}; not "
            f"{', '.join(map(_flag, unknown))}",
            name,
            hint=_OWN_OPTIONS if part else None,
        )
    params: dict[str, Any] = {key: _value(key, text, cls) for key, text in given.items()}
    holder = _COMPOSITES.get(name)
    if holder is None and parts:
        raise ConfigError("then", f"is for composites ({', '.join(_COMPOSITES)}), not {name}", name)
    if holder == "schedule":
        if len(parts) != 1:
            raise ConfigError(
                "then",
                f"{name} wraps one schedule: give it as --then NAME --param VALUE ...",
                len(parts),
            )
        params["schedule"] = _build(*parts[0], [], None, part=True)
    elif holder == "schedules":
        boundaries = params.get("boundaries", ())
        if len(parts) != len(boundaries) + 1:
            raise ConfigError(
                "then",
                f"join needs one --then part per interval: {len(boundaries) + 1} for "
                f"{len(boundaries)} boundaries",
                len(parts),
            )
        params["schedules"] = tuple(_build(*p, [], None, part=True) for p in parts)
    if "total_steps" in accepted and "total_steps" not in params and total_steps is not None:
        params["total_steps"] = total_steps
    missing = [
        key for key in _required(cls) if key not in params and key not in ("schedule", "schedules")
    ]
    if missing:
        raise ConfigError("schedule", f"{name} needs {', '.join(map(_flag, missing))}", name)
    return cls(**params)
