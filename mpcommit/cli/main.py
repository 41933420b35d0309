"""``mpcommit``: the command group, its global options, and the exit-status contract.

Exit status: 0 success, 1 failure (an S3 error, a refused operation, an interrupted or declined run),
2 usage error (bad option, malformed duration or size, a URI that is not S3). Errors are one line on stderr,
``mpcommit: error: ...``, without a traceback; a traceback means a bug in mpcommit.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
import sys
from collections.abc import Sequence

import click

from ..errors import MpcommitError, UsageError
from ..options import S3Options
from .common import CliContext, fail
from .jobs import jobs
from .lifecycle import lifecycle
from .show import show
from .uploads import uploads

#: Commands that live in modules written separately; registered only when their module is installed, and
#: imported only when used (they may pull in heavier dependencies than the rest of the CLI).
LAZY_COMMANDS = {
    "demo": ("mpcommit.cli.demo", "demo"),
    "compact": ("mpcommit.cli.compact", "compact"),
    "catalog": ("mpcommit.cli.catalog", "catalog"),
    "doctor": ("mpcommit.cli.doctor", "doctor"),
}

_ENDPOINT_RE = re.compile(r"^https?://[^\s/]+", re.IGNORECASE)

#: The library's errors name the Python API's settings; on the command line the same settings are flags.
_CLI_WORDING = (
    ("S3Options(endpoint_url=...)", "--endpoint-url"),
    ("S3Options(profile=...)", "--profile"),
    ("or pass S3Options(access_key_id=..., secret_access_key=...)", "or name a profile with --profile"),
)


def cli_wording(message: str) -> str:
    """An error message of the library as the command line's user needs it: its flags where the message names
    the Python API's ``S3Options`` settings."""
    for api, flag in _CLI_WORDING:
        message = message.replace(api, flag)
    return message


#: The group's own options, which may also come after the command (``mpcommit uploads list URI --region R``).
GLOBAL_OPTIONS = ("--endpoint-url", "--region", "--profile")
#: The group's own flags (no value), which may come after the command too.
GLOBAL_FLAGS = ("--single-writer",)


def hoist_global_options(args: Sequence[str]) -> list[str]:
    """Move the global options (and their values) found after the command to the front, as the aws CLI accepts
    them anywhere. Nothing after ``--`` is touched."""
    front: list[str] = []
    rest: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            rest.extend(args[i:])
            break
        name = arg.split("=", 1)[0]
        if arg in GLOBAL_FLAGS:
            front.append(arg)
            i += 1
            continue
        if name in GLOBAL_OPTIONS:
            if "=" in arg:
                front.append(arg)
                i += 1
            elif i + 1 >= len(args):
                raise click.UsageError(f"Option '{arg}' requires an argument.")
            else:
                front.extend(args[i:i + 2])
                i += 2
            continue
        rest.append(arg)
        i += 1
    return front + rest


class MpcommitGroup(click.Group):
    """A group whose optional commands are imported on first use, and whose options may follow the command."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        return super().parse_args(ctx, hoist_global_options(args))

    def list_commands(self, ctx: click.Context) -> list[str]:
        names = set(super().list_commands(ctx))
        names.update(name for name, (module, _attr) in LAZY_COMMANDS.items() if _module_exists(module))
        return sorted(names)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = super().get_command(ctx, cmd_name)
        if command is not None or cmd_name not in LAZY_COMMANDS:
            return command
        module_name, attr = LAZY_COMMANDS[cmd_name]
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            # Only the command's own module being absent means "not installed"; a missing dependency inside
            # it is a real error and surfaces as such.
            if exc.name == module_name:
                return None
            raise
        command = getattr(module, attr)
        if not isinstance(command, click.Command):
            raise TypeError(f"{module_name}.{attr} is not a click command")
        return command


def _module_exists(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:
        return False


@click.group(cls=MpcommitGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.option("--endpoint-url", metavar="URL", help="S3 endpoint (LocalStack, MinIO, Ceph...). Default: boto3's "
              "AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL, else AWS.")
@click.option("--region", metavar="R", help="Region. Default: boto3's (AWS_REGION, AWS_DEFAULT_REGION, profile).")
@click.option("--profile", metavar="P", help="Named profile from ~/.aws/config. Default: AWS_PROFILE or 'default'.")
@click.option("--single-writer", is_flag=True, help="State that each table has one job at a time (no concurrent "
              "writes, aborts or recoveries): needed only on a store without conditional writes, which mpcommit "
              "otherwise refuses to act on (`mpcommit doctor` tells).")
@click.version_option(package_name="mpcommit", prog_name="mpcommit")
@click.pass_context
def cli(ctx: click.Context, endpoint_url: str | None, region: str | None, profile: str | None,
        single_writer: bool) -> None:
    """Commit many files written in parallel to S3 without renames; list, price and clean up what jobs leave.

    Pending multipart uploads are invisible in listings yet billed until aborted: `uploads list` finds them,
    `uploads abort` removes orphans without touching live jobs, `jobs` finishes or rolls back stuck jobs.
    Credentials come from boto3's usual sources (environment, profiles, instance roles). The options below may
    also follow the command, as with the aws CLI: `mpcommit uploads list s3://bucket/t --endpoint-url URL`.
    """
    if endpoint_url is not None and not _ENDPOINT_RE.match(endpoint_url):
        raise click.BadParameter(f"{endpoint_url!r} is not an http:// or https:// URL", param_hint="'--endpoint-url'")
    ctx.obj = CliContext(S3Options(endpoint_url=endpoint_url, region=region, profile=profile,
                                   single_writer=single_writer))


cli.add_command(uploads)
cli.add_command(jobs)
cli.add_command(show)
cli.add_command(lifecycle)


def main(argv: Sequence[str] | None = None) -> int:
    """The ``mpcommit`` console script. Returns (and, run as a script, exits with) the exit status."""
    try:
        result = cli.main(args=list(argv) if argv is not None else None, prog_name="mpcommit", standalone_mode=False)
        code = result if isinstance(result, int) else 0
    except click.exceptions.Exit as exc:
        code = exc.exit_code
    except click.ClickException as exc:  # click's usage errors exit 2, the others 1
        exc.show()
        code = exc.exit_code
    except click.Abort:
        click.echo("mpcommit: aborted", err=True)
        code = 1
    except UsageError as exc:
        fail(cli_wording(str(exc)))
        code = 2
    except MpcommitError as exc:
        fail(cli_wording(str(exc)))
        code = 1
    except KeyboardInterrupt:
        click.echo("\nmpcommit: interrupted", err=True)
        code = 1
    except BrokenPipeError:
        # `mpcommit uploads list ... | head`: the reader went away; not an error worth a traceback.
        try:
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - keep the interpreter's final flush quiet
        except OSError:
            pass
        code = 1
    return code


def _run() -> None:
    sys.exit(main())


if __name__ == "__main__":
    _run()
