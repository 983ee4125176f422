"""``globalstep ckpt ls | show | verify | prune | ledger``: inspect and tidy a checkpoint directory.

``ls`` lists the run's fast tier too (a TIER column, ``fast`` or ``durable``), found from
what DIRECTORY records or ``--fast PATH``.

``ls`` and ``show`` read only state.json files; ``verify`` reads every byte and checks every
checksum (exit status 1 on any corruption, naming it); ``prune`` takes the writer's lock;
``ledger`` prints a run's ledger (a Run's directory, or a checkpoint directory; see
:mod:`globalstep.checkpoint._ledger`) as tables and its goodput line, or ``--json``.
The read-only commands never create a file. A DIRECTORY that does not exist or is not a
directory is a usage error (exit status 2); one that cannot be read, holds no checkpoint
directory, or holds a damaged checkpoint is a failure (exit status 1). Each is one line.

Example:
    >>> import numpy as np, tempfile
    >>> from globalstep.checkpoint import CheckpointManager
    >>> from globalstep._cli import main
    >>> directory = tempfile.mkdtemp()
    >>> with CheckpointManager(directory) as manager:
    ...     manager.save(100, {"w": np.zeros((2, 3), np.float32)}, metrics={"loss": 0.5})
    >>> main(["ckpt", "verify", directory])
    step 100: ok
    1 checkpoint verified
    0
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings
from collections.abc import Callable
from typing import Any

from globalstep._errors import CheckpointNotFoundError, ConfigError, CorruptCheckpointError
from globalstep.checkpoint._directory.policy import KeepAny, KeepBest, KeepLatest, KeepPolicy
from globalstep.checkpoint._fast_tier import claim, recorded_fast_tier
from globalstep.checkpoint._ledger import LEDGER_FILE, LedgerSummary, read_ledger
from globalstep.checkpoint._manager import CheckpointManager, CheckpointWarning
from globalstep.checkpoint._tree.leaves import decode_dtype
from globalstep.storage import LOCK_FILE, open_storage

__all__ = ["add_parser"]


def _size(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")  # pragma: no cover


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    )


class _UsageError(Exception):
    """A user error of ``globalstep ckpt``: one line, and the exit status."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


def _check_directory(text: str) -> None:
    """Checks the DIRECTORY argument without creating anything; raises _UsageError."""
    storage = open_storage(text)
    if not storage.local:
        if not storage.exists(storage.root):
            raise _UsageError(
                f"DIRECTORY {text} does not exist; give the run's checkpoint directory", 2
            )
        names = storage.listdir(storage.root)
    else:
        path = storage.root
        if not os.path.lexists(path):
            raise _UsageError(
                f"DIRECTORY {text} does not exist; give the run's checkpoint directory "
                "(the one that holds its step-* directories)",
                2,
            )
        if not os.path.isdir(path):
            raise _UsageError(
                f"DIRECTORY {text} is not a directory; give the checkpoint directory that "
                "holds the step-* directories, not a file",
                2,
            )
        try:
            names = os.listdir(path)
        except OSError as err:
            raise _UsageError(
                f"DIRECTORY {text} cannot be read ({err.strerror}); give a directory you "
                "may read, or run as its owner",
                1,
            ) from None
    looks = any(n.startswith("step-") or n == LOCK_FILE for n in names)
    if names and not looks:
        raise _UsageError(
            f"DIRECTORY {text} is not a checkpoint directory: it holds no step-* "
            f"checkpoint and no writer's {LOCK_FILE} ({len(names)} other "
            f"entr{'y' if len(names) == 1 else 'ies'}); give the directory the run's "
            "CheckpointManager writes",
            1,
        )


def _run(
    action: str,
    command: Callable[[argparse.Namespace], int],
    check: Callable[[str], object] = _check_directory,
) -> Any:
    """Wraps ``command``: checks DIRECTORY first, prints a _UsageError or a warning as one line."""

    def run(args: argparse.Namespace) -> int:
        try:
            check(args.directory)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always", CheckpointWarning)
                status = command(args)
            for warning in caught:
                if issubclass(warning.category, CheckpointWarning):
                    print(f"globalstep ckpt {action}: warning: {warning.message}", file=sys.stderr)
                else:  # pragma: no cover - another module's warning goes on its way
                    warnings.warn_explicit(
                        warning.message, warning.category, warning.filename, warning.lineno
                    )
            return status
        except _UsageError as failure:
            print(f"globalstep ckpt {action}: error: {failure}", file=sys.stderr)
            return failure.status

    return run


def _summaries(directory: str, show_all: bool) -> tuple[list[Any], dict[int, str]]:
    with CheckpointManager(directory, read_only=True, max_to_keep=None) as manager:
        summaries = manager.summaries(manager.stored_policy() or KeepAny(()))
        return summaries, manager.incomplete() if show_all else {}


def _fast_tier(args: argparse.Namespace) -> str | None:
    """The fast tier to list beside DIRECTORY (``--fast``, or the one it records), where it
    is there and of the same run; else None, saying why on standard error."""
    durable = open_storage(args.directory)
    path = args.fast or recorded_fast_tier(durable)
    if path is None:
        return None
    if not os.path.isdir(path):
        print(f"fast tier {path}: missing (not on this machine?)", file=sys.stderr)
        return None
    try:
        steps = CheckpointManager(path, read_only=True).steps()
        claim(open_storage(path), durable, writable=False, has_steps=bool(steps))
    except ConfigError as err:
        print(f"fast tier {path}: not listed: {err}", file=sys.stderr)
        return None
    return path


def _ls(args: argparse.Namespace) -> int:
    fast = _fast_tier(args)
    tiers = [("durable", args.directory), *([("fast", fast)] if fast else [])]
    listed = [(tier, *_summaries(path, args.all)) for tier, path in tiers]
    if not any(summaries or incomplete for _, summaries, incomplete in listed):
        print(f"no committed checkpoint in {args.directory}")
        return 0
    rows = [["STEP", "EPOCH", "TIME (UTC)", "SIZE", "METRICS", "KEPT BECAUSE"]]
    for tier, summaries, incomplete in listed:
        mark = [tier] if fast else []
        for s in summaries:
            if s.error is not None:
                rows.append([str(s.step), *mark, "?", "?", "?", "?", f"CORRUPT: {s.error}"])
                continue
            epoch = str(s.clocks[0].epoch) if s.clocks else "-"
            when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(s.created_unix))
            metrics = " ".join(f"{k}={v:.6g}" for k, v in sorted(s.metrics.items())) or "-"
            size = _size(s.size_bytes)
            rows.append([str(s.step), *mark, epoch, when, size, metrics, s.kept_because])
        for step, why in sorted(incomplete.items()):
            rows.append([str(step), *mark, "?", "?", "?", "?", f"NOT A CHECKPOINT: {why}"])
    if fast:
        rows[0].insert(1, "TIER")
    rows[1:] = sorted(rows[1:], key=lambda row: (int(row[0]), row[1]))
    print(_table(rows))
    return 0


def _tree_lines(node: Any, path: str, out: list[str]) -> None:
    if not isinstance(node, dict):
        out.append(f"  {path or '<root>'}: ?")
        return
    if "array" in node:
        dtype = decode_dtype(node.get("dtype"))
        out.append(f"  {path or '<root>'}: {dtype} {tuple(node.get('shape', ()))}")
    elif "dict" in node and isinstance(node["dict"], dict):
        for key, child in node["dict"].items():
            _tree_lines(child, f"{path}/{key}" if path else key, out)
    elif "list" in node or "tuple" in node:
        children = node.get("list", node.get("tuple"))
        for i, child in enumerate(children if isinstance(children, list) else []):
            _tree_lines(child, f"{path}/{i}" if path else str(i), out)
    elif "stateful" in node:
        _tree_lines(node["stateful"], path, out)
    elif "adapted" in node:  # a framework object (a torch module, a tensor): its plain state
        _tree_lines(node.get("state"), path, out)
    elif "sharded" in node:
        out.append(
            f"  {path or '<root>'}: {node.get('dtype')} {tuple(node.get('shape', ()))} sharded"
        )
    elif "per_rank" in node:  # each rank's own leaf, in per_rank/rank-NNNNN.safetensors
        out.append(f"  {path or '<root>'}: per-rank (each rank's own file)")
    else:
        out.append(f"  {path or '<root>'} = {node.get('value', node.get('float'))!r}")


def _show(args: argparse.Namespace) -> int:
    with CheckpointManager(args.directory, read_only=True) as manager:
        state = manager.document(args.step)
    # Checksums passed, but another version may have written other fields: show, never crash.
    stamp = state.created_unix
    created = (
        time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(stamp))
        if isinstance(stamp, int | float) and not isinstance(stamp, bool)
        else "?"
    )
    lines = [f"step {state.step}  saved {created}"]
    clocks = state.clocks
    for clock in clocks if isinstance(clocks, list) else []:
        if not isinstance(clock, dict):
            continue
        elapsed = clock.get("elapsed_seconds")
        lines.append(
            f"clock {clock.get('clock')!r}: step {clock.get('step')}, epoch {clock.get('epoch')}"
            f", step in epoch {clock.get('step_in_epoch')}, samples {clock.get('samples')}"
            f", tokens {clock.get('tokens')}, "
            + (f"{elapsed:.1f} s" if isinstance(elapsed, int | float) else "? s")
        )
    metrics = state.metrics
    for name, value in sorted((metrics if isinstance(metrics, dict) else {}).items()):
        lines.append(f"metric {name} = {value}")
    lines.append("tree:")
    _tree_lines(state.tree, "", lines)
    print("\n".join(lines))
    return 0


def _verify(args: argparse.Namespace) -> int:
    with CheckpointManager(args.directory, read_only=True) as manager:
        steps = manager.steps()
        incomplete = manager.incomplete()
        if not steps and not incomplete:
            print(f"no committed checkpoint in {args.directory}")
            return 1
        bad = 0
        checked = 0
        for step in steps:
            try:
                manager.verify(step)
            except CorruptCheckpointError as err:
                bad += 1
                print(f"step {step}: CORRUPT: {err}")
            except CheckpointNotFoundError:
                continue  # pruned by a live writer while being verified: not there any more
            else:
                print(f"step {step}: ok")
            checked += 1
        for step, why in sorted(incomplete.items()):
            print(f"step {step}: NOT A CHECKPOINT: {why}")
    if bad or incomplete:
        problems = [f"{bad} of {checked} checkpoints corrupt"] if bad else []
        if incomplete:
            problems.append(f"{len(incomplete)} step-* entries not committed")
        print("; ".join(problems))
        return 1
    print(f"{checked} checkpoint{'s' if checked != 1 else ''} verified")
    return 0


def _best_policies(policy: KeepPolicy | None) -> tuple[KeepBest, ...]:
    """The KeepBest parts of a retention policy."""
    if isinstance(policy, KeepBest):
        return (policy,)
    if isinstance(policy, KeepAny):
        return tuple(b for p in policy.policies for b in _best_policies(p))
    return ()


def _prune(args: argparse.Namespace) -> int:
    if args.keep < 1:
        raise _UsageError(
            str(
                ConfigError(
                    "--keep", "must be >= 1 (the newest checkpoint is always kept)", args.keep
                )
            ),
            2,
        )
    with CheckpointManager(args.directory, max_to_keep=None) as manager:
        # The writer's keep_best still holds: pruning never deletes the best checkpoints.
        best = _best_policies(manager.stored_policy())
        policy = KeepAny((KeepLatest(args.keep), *best)) if best else KeepLatest(args.keep)
        doomed = manager.prune(policy, dry_run=args.dry_run)
        left = manager.steps()
    verb = "would delete" if args.dry_run else "deleted"
    print(f"{verb} steps {doomed}" if doomed else "nothing to delete")
    if not args.dry_run:
        print(f"kept steps {left}")
    return 0


def _ledger_path(text: str) -> str:
    """The ledger of DIRECTORY ``text`` (a Run's directory, or a checkpoint directory);
    raises _UsageError where there is none."""
    if not os.path.isdir(text):
        why = "does not exist" if not os.path.lexists(text) else "is not a directory"
        raise _UsageError(
            f"DIRECTORY {text} {why}; give a Run's directory (or the checkpoint directory "
            "of a CheckpointManager used without a Run)",
            2,
        )
    path = os.path.join(text, LEDGER_FILE)
    if not os.path.isfile(path):
        raise _UsageError(
            f"DIRECTORY {text} holds no {LEDGER_FILE}; give a Run's directory (or the "
            "checkpoint directory of a CheckpointManager used without a Run), written "
            "by a writer with a ledger (read-only managers and object stores keep none)",
            1,
        )
    return path


def _seconds(value: Any) -> str:
    """``value`` seconds as the ledger's tables show them: ms below one second."""
    if not isinstance(value, int | float):
        return "-"
    return f"{value * 1e3:.1f} ms" if value < 1 else f"{value:.2f} s"


def _ledger_tables(summary: LedgerSummary) -> list[str]:
    head = "ATTEMPT|STARTED (UTC)|RESUMED FROM|TIER|REDONE|RESTORE|SAVES|STALLS|WALL|END"
    rows = [head.split("|")]
    for number, a in enumerate(summary.attempts, 1):
        tier = a["tier"] or "-"
        if a["fell_back_from"] is not None:
            tier += f" (fell back from {a['fell_back_from']})"
        redone = "-" if a["steps_redone"] is None else str(a["steps_redone"])
        if a["redone_seconds"]:
            redone += f" ({_seconds(a['redone_seconds'])})"
        end = "clean" if a["clean"] else ("crashed" if a["ended"] is None else str(a["error"]))
        rows.append(
            [
                str(number),
                time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(a["started"])),
                "-" if a["resumed_from"] is None else str(a["resumed_from"]),
                tier,
                redone,
                _seconds(a["restore_seconds"]),
                str(a["saves"]),
                _seconds(a["stall_seconds"]),
                _seconds(a["wall_seconds"]),
                end,
            ]
        )
    lines = [_table(rows)]
    if summary.saves:
        rows = [["STEP", "TIER", "SIZE", "STALL", "BACKGROUND", "GB/S", "FLOOR GB/S", "ATTEMPT"]]
        for save in summary.saves:
            gbps, floor = save.get("gbps"), save.get("floor_gbps")
            rows.append(
                [
                    str(save.get("step")),
                    str(save.get("tier")),
                    _size(int(save.get("bytes", 0))),
                    _seconds(save.get("stall_seconds")),
                    _seconds(save.get("background_seconds")),
                    f"{gbps:.3g}" if isinstance(gbps, int | float) else "-",
                    f"{floor:.3g}" if isinstance(floor, int | float) else "-",
                    str(save["attempt"]) + (" (lost)" if save["lost"] else ""),
                ]
            )
        lines += ["", _table(rows)]
    return lines


def _ledger(args: argparse.Namespace) -> int:
    path = _ledger_path(args.directory)
    try:
        summary = read_ledger(path)
    except CorruptCheckpointError as err:
        raise _UsageError(str(err), 1) from None
    if summary.torn_last_line:
        print(
            f"globalstep ckpt ledger: warning: skipped the torn last line of {path} "
            f"({summary.torn_last_line} bytes, cut short by a crash)",
            file=sys.stderr,
        )
    if args.json:
        print(json.dumps(summary.to_json(), indent=2))
        return 0
    print("\n".join([*_ledger_tables(summary), "", summary.goodput_line()]))
    return 0


def add_parser(subparsers: Any) -> None:
    """Registers ``globalstep ckpt`` and its five sub-commands."""
    parser = subparsers.add_parser(
        "ckpt", help="inspect, verify and prune checkpoints", description=__doc__.splitlines()[0]
    )
    commands = parser.add_subparsers(dest="ckpt_command", metavar="ACTION", required=True)
    ls = commands.add_parser("ls", help="a table of the committed checkpoints")
    ls.add_argument(
        "--all", action="store_true", help="also list step-* entries that are not committed"
    )
    ls.add_argument(
        "--fast",
        metavar="PATH",
        default=None,
        help="the fast tier to list beside it (default: the one DIRECTORY records)",
    )
    ls.set_defaults(func=_run("ls", _ls))
    show = commands.add_parser("show", help="one checkpoint's tree, shapes, dtypes, clocks")
    show.add_argument("--step", type=int, default=None, help="the step (default: newest)")
    show.set_defaults(func=_run("show", _show))
    verify = commands.add_parser("verify", help="check every checksum; exit 1 on corruption")
    verify.set_defaults(func=_run("verify", _verify))
    prune = commands.add_parser("prune", help="delete all but the newest N checkpoints")
    prune.add_argument("--keep", type=int, required=True, help="how many newest to keep")
    prune.add_argument("--dry-run", action="store_true", help="only say what would go")
    prune.set_defaults(func=_run("prune", _prune))
    for sub in (ls, show, verify, prune):
        sub.add_argument("directory", help="the checkpoint directory (path or fsspec URL)")
    ledger = commands.add_parser(
        "ledger", help="every attempt and save of a run, what each cost, and the goodput"
    )
    ledger.add_argument("--json", action="store_true", help="print it as JSON")
    ledger.add_argument(
        "directory", help="a Run's directory, or the checkpoint directory of a manager alone"
    )
    ledger.set_defaults(func=_run("ledger", _ledger, _ledger_path))
