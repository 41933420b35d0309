"""Shared pieces of the CLI: the global S3 options, option types, consoles, progress bars, Ctrl-C handling and
human-readable numbers. Commands of other modules (``demo``, ``compact``) may use them too."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from types import FrameType
from typing import Any

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TaskID, TextColumn, TimeElapsedColumn

from ..errors import MpcommitError, UsageError
from ..options import OrderSettings, S3Options
from ..protocol.layout import Destination, check_job_id, parse_uri
from ..units import human_bytes, parse_duration, parse_size, parse_wait, utc  # noqa: F401 - human_bytes: the CLI modules take it from here
from ..store.s3 import S3Store, store_for


# ---------------------------------------------------------------- the global options
@dataclass(frozen=True)
class CliContext:
    """What the group's global options (--endpoint-url, --region, --profile) decided; ``ctx.obj`` of every command."""

    s3: S3Options

    def store(self) -> S3Store:
        return store_for(self.s3)


def cli_context(ctx: click.Context) -> CliContext:
    found = ctx.find_object(CliContext)
    return found if found is not None else CliContext(S3Options())


# ---------------------------------------------------------------- option types (bad values exit with status 2)
class DurationType(click.ParamType):
    """``90s``, ``30m``, ``24h``, ``7d`` -> seconds."""

    name = "DUR"
    parse = staticmethod(parse_duration)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        if isinstance(value, (int, float)):
            return float(value)
        try:
            return self.parse(str(value))
        except UsageError as exc:
            self.fail(str(exc), param, ctx)


class WaitType(DurationType):
    """A duration, or ``forever``."""

    parse = staticmethod(parse_wait)


class SizeType(click.ParamType):
    """``16MB`` (decimal), ``16MiB`` (binary) or a byte count -> bytes."""

    name = "SIZE"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value
        try:
            return parse_size(str(value))
        except UsageError as exc:
            self.fail(str(exc), param, ctx)


class S3UriType(click.ParamType):
    """An ``s3://bucket/prefix`` URI (``s3a://`` and ``s3n://`` too), checked but kept as typed."""

    name = "S3URI"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        try:
            parse_uri(str(value))
        except UsageError as exc:
            self.fail(str(exc), param, ctx)
        return str(value)


class JobIdType(click.ParamType):
    name = "ID"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        try:
            return check_job_id(str(value).strip().lower())
        except UsageError as exc:
            self.fail(str(exc), param, ctx)


DURATION = DurationType()
WAIT = WaitType()
SIZE = SizeType()
S3URI = S3UriType()


def order_options(command: Any) -> Any:
    """``--lease DUR`` and ``--max-wait DUR``: how a command that finishes or waits for jobs judges them
    (:class:`~mpcommit.options.OrderSettings`)."""
    command = click.option("--max-wait", type=WAIT, default=None, metavar="DUR",
                           help="Give up, naming it, after waiting this long for a live earlier job of the table. "
                                "Default: 30m; 'forever' waits while it is alive.")(command)
    return click.option("--lease", type=DURATION, default=None, metavar="DUR",
                        help="Take a job whose heartbeat stayed the same this long for dead, and finish or roll "
                             "it back. Default: 60s (the jobs' own heartbeat beats every 10s).")(command)


def order_settings(lease: float | None, max_wait: float | None) -> OrderSettings:
    """The OrderSettings of ``--lease`` and ``--max-wait`` (a lease shorter than two of the default beats beats
    more often itself)."""
    return OrderSettings.for_lease(lease, max_wait)


JOB_ID = JobIdType()


def destination(uri: str) -> Destination:
    return parse_uri(uri)


# ---------------------------------------------------------------- output
def out_console() -> Console:
    """Tables for people on stdout. When stdout is not a terminal, a wide fixed width keeps rows on one line.

    Markup is off: keys, prefixes and rule ids are data and may contain ``[...]``; style with ``style=`` or
    :class:`rich.text.Text` instead.
    """
    console = Console(highlight=False, markup=False)
    if not console.is_terminal:
        console = Console(highlight=False, markup=False, width=int(os.environ.get("COLUMNS", "0") or 0) or 220)
    return console


def err_console() -> Console:
    """Progress, prompts and messages on stderr (markup off, as on stdout)."""
    return Console(stderr=True, highlight=False, markup=False)


def print_json(document: Any) -> None:
    """Exactly one JSON document on stdout."""
    click.echo(json.dumps(document, indent=2, default=str))


def fail(message: str) -> None:
    """Report a failure on stderr (the caller exits with status 1)."""
    click.echo(f"mpcommit: error: {' '.join(message.split())}", err=True)


def require_confirmation_possible(*, yes: bool, dry_run: bool = False) -> None:
    """Refuse up front, before any work, when a prompt would be needed and there is no one to answer it
    (cron, CI, a pipe): an unattended run must say --yes on purpose."""
    if yes or dry_run:
        return
    stdin = sys.stdin
    if stdin is None or not stdin.isatty():
        raise UsageError("stdin is not a terminal, so nobody can confirm: pass --yes to go ahead without asking "
                         "(or --dry-run to only look)")


class ProgressBars:
    """rich progress bars on stderr, one per phase, fed by the library's ``(phase, done, total)`` hooks.

    Shown only when stderr is a terminal: logs and pipes get no control codes.
    """

    LABELS = {
        "list": "Listing uploads",
        "jobs": "Reading job records",
        "size": "Measuring uploads (ListParts)",
        "abort": "Aborting uploads",
    }

    def __init__(self, console: Console | None = None, *, enabled: bool | None = None):
        self.console = console or err_console()
        self.enabled = self.console.is_terminal if enabled is None else enabled
        self._progress = Progress(
            SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
            TimeElapsedColumn(), console=self.console, transient=True, disable=not self.enabled,
        )
        self._tasks: dict[str, TaskID] = {}

    def __enter__(self) -> "ProgressBars":
        self._progress.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._progress.__exit__(*exc)  # type: ignore[arg-type]

    def __call__(self, phase: str, done: int, total: int | None) -> None:
        if phase not in self._tasks:
            self._tasks[phase] = self._progress.add_task(self.LABELS.get(phase, phase), total=total)
        self._progress.update(self._tasks[phase], completed=done, total=total)

    @contextmanager
    def paused(self) -> Iterator[None]:
        """Stop redrawing (e.g. while a prompt waits for an answer), then carry on."""
        if not self.enabled:
            yield
            return
        self._progress.stop()
        try:
            yield
        finally:
            self._progress.start()

    @contextmanager
    def status(self, description: str) -> Iterator[None]:
        """A spinner for a step that reports no counts."""
        task = self._progress.add_task(description, total=None)
        try:
            yield
        finally:
            self._progress.remove_task(task)


@contextmanager
def interruptible() -> Iterator[threading.Event]:
    """Turn the first Ctrl-C into a cancel request (the operation stops cleanly and reports what it did);
    a second Ctrl-C interrupts at once."""
    event = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield event
        return
    previous = signal.getsignal(signal.SIGINT)

    def on_sigint(signum: int, frame: FrameType | None) -> None:
        if event.is_set():
            signal.signal(signal.SIGINT, signal.default_int_handler)
            raise KeyboardInterrupt
        event.set()
        os.write(2, b"\nmpcommit: interrupted: finishing the requests in flight, then stopping "
                    b"(press Ctrl-C again to quit at once)\n")

    signal.signal(signal.SIGINT, on_sigint)
    try:
        yield event
    finally:
        signal.signal(signal.SIGINT, previous)


# ---------------------------------------------------------------- numbers for people
def plural(count: int, noun: str) -> str:
    """``1 upload``, ``2 uploads``, ``1,000 uploads``."""
    return f"{count:,} {noun}" + ("" if count == 1 else "s")


def human_duration(seconds: float) -> str:
    """A duration as people write it, without the zero units: ``7d``, ``1d 2h``, ``90m`` -> ``1h 30m``."""
    seconds = int(round(seconds))
    units = (("d", 86400), ("h", 3600), ("m", 60), ("s", 1))
    parts = []
    for name, size in units:
        value, seconds = divmod(seconds, size)
        if value:
            parts.append(f"{value}{name}")
    return " ".join(parts) or "0s"


def human_age(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    seconds = int(seconds)
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d {hours}h"
    if hours:
        return f"{hours}h {minutes}m"
    if minutes:
        return f"{minutes}m {secs}s"
    return f"{secs}s"


def human_time(value: datetime | float | int | None) -> str:
    """UTC, to the second; numbers are epoch milliseconds."""
    if value is None:
        return "?"
    if isinstance(value, (int, float)):
        value = datetime.fromtimestamp(value / 1000, timezone.utc)
    return utc(value).astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def short_id(upload_id: str, width: int = 16) -> str:
    return upload_id if len(upload_id) <= width else upload_id[: width - 1] + "…"


__all__ = [
    "CliContext", "DURATION", "JOB_ID", "MpcommitError", "ProgressBars", "S3URI", "SIZE", "cli_context", "destination",
    "err_console", "fail", "human_age", "human_bytes", "human_duration", "human_time", "interruptible", "out_console",
    "plural", "print_json",
    "require_confirmation_possible", "short_id",
]
