"""The ``numbatraj`` command.  Thin: parses arguments and calls the library.

One module per command group; each imports the library lazily inside its commands, so
``numbatraj --help`` (and every command's ``--help``) loads nothing but argparse and works
with the core install alone.  A command whose optional dependency is missing exits 2 with
one line naming the extra; Ctrl-C exits 130; no error prints a traceback unless ``-v``.
"""

from __future__ import annotations

import argparse
import logging
import re
import sys
from collections.abc import Sequence

from numbatraj._version import __version__
from numbatraj.cli import assets, catalog, dataset, formats, lerobot, remote, store
from numbatraj.cli._common import (
    DISTRIBUTION,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    UsageError,
    extra_for,
)
from numbatraj.cli.store import format_info

__all__ = ["build_parser", "format_info", "main"]

_EPILOG = """\
exit codes: 0 ok, 1 failed (the reason on one line of stderr), 2 usage (a bad argument, or
an optional dependency not installed: the line names the extra), 130 interrupted.
Reports (info, validate, remote list/describe, assets status, dataset list) take --json.
"""

# Library messages speak in keyword arguments; the command speaks in flags.
_REWORD = (
    (re.compile(r"\bpass overwrite=True\b"), "pass --overwrite"),
    (re.compile(r"\boverwrite=True\b"), "--overwrite"),
    (re.compile(r"\bforce=True\b"), "--overwrite"),
)


def cli_words(message: str) -> str:
    """``message`` with the library's keyword arguments replaced by the command's flags."""
    for pattern, flag in _REWORD:
        message = pattern.sub(flag, message)
    return message


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="numbatraj",
        description="Trajectory stores for RL and robot learning.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"numbatraj {__version__}")
    p.add_argument("-q", "--quiet", action="count", default=0,
                   help="less output: warnings and errors only, no progress bars (-qq: errors)")
    p.add_argument("-v", "--verbose", action="count", default=0,
                   help="more output: debug logging, tracebacks on errors")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    store.register(sub)
    imp = sub.add_parser(
        "import", help="convert a dataset from another format into a store",
        description="numbatraj import FORMAT SOURCE [--out PATH] [--overwrite]",
    )
    imp_sub = imp.add_subparsers(dest="format", required=True, metavar="FORMAT")
    lerobot.register_import(imp_sub)
    formats.register(imp_sub)
    catalog.register(sub)
    remote.register(sub)
    lerobot.register(sub)
    assets.register(sub)
    dataset.register(sub)
    return p


def _configure_logging(level: int) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s" if level > logging.DEBUG
                                           else "%(levelname)s %(name)s: %(message)s"))
    log = logging.getLogger("numbatraj")
    log.handlers[:] = [handler]
    log.setLevel(level)
    log.propagate = False


def _command_name(args: argparse.Namespace) -> str:
    parts = [args.command]
    for key in ("format", "lerobot_command", "remote_command", "assets_command",
                "dataset_command", "catalog_command"):
        val = getattr(args, key, None)
        if isinstance(val, str):
            parts.append(val)
    return " ".join(parts)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command ``argv`` (default ``sys.argv[1:]``); returns the exit code."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version (0) and argparse's usage errors (2)
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    n = args.verbose - args.quiet
    level = (logging.DEBUG if n > 0 else logging.INFO if n == 0
             else logging.WARNING if n == -1 else logging.ERROR)
    _configure_logging(level)
    args.progress = args.quiet == 0 and sys.stderr.isatty()
    name = _command_name(args)
    log = logging.getLogger("numbatraj.cli")
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        print(f"numbatraj {name}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # `numbatraj ... | head`
        return EXIT_OK
    except ModuleNotFoundError as exc:
        extra = extra_for(exc.name, getattr(args, "extras", ()))
        if extra is None:
            log.debug("traceback", exc_info=True)
            print(f"numbatraj {name}: error: {exc}", file=sys.stderr)
            return EXIT_FAILED
        dist = DISTRIBUTION.get(str(exc.name).split(".")[0], exc.name)
        print(f"numbatraj {name}: needs {dist}, which is not installed: "
              f"pip install 'numbatraj[{extra}]'", file=sys.stderr)
        return EXIT_USAGE
    except UsageError as exc:
        print(f"numbatraj {name}: error: {cli_words(str(exc))}", file=sys.stderr)
        return EXIT_USAGE
    except Exception as exc:
        from numbatraj.errors import NumbatrajError

        log.debug("traceback", exc_info=True)
        msg = cli_words(str(exc))
        if isinstance(exc, (NumbatrajError, OSError)):
            print(f"numbatraj {name}: error: {msg}", file=sys.stderr)
            return EXIT_FAILED
        if type(exc) in (ValueError, TypeError):  # a bad argument value the library refused
            print(f"numbatraj {name}: error: {msg}", file=sys.stderr)
            return EXIT_USAGE
        print(f"numbatraj {name}: internal error: {type(exc).__name__}: {msg} "
              f"(run with -v for the traceback)", file=sys.stderr)
        return EXIT_FAILED


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
