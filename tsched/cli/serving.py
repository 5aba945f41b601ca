"""`tsched serve`: run the predictor service, configured by flags over a TOML file (`--config`) over the defaults.

The file's keys are the options' names without dashes, in the table their `--help` group names: the top
level (what to serve), `[security]` (`predictor.service.server.Security`) and `[limits]`
(`predictor.service.limits.Limits`). A key the server does not know is refused, naming the file and the key;
relative paths in the file are read from the file's folder. The effective configuration is logged at start
(and printed by `--print-config`) as a file `--config` reads back.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import json
import logging
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kernel.errors import UsageError
from tsched.cli.spec import Command, Group, Option, Table

if TYPE_CHECKING:
    from predictor.forecasting import StartForecaster
    from predictor.service.limits import Limits
    from predictor.service.server import Security

log = logging.getLogger("tsched.serve")
#: Where a setting's value came from, when not from its default.
FLAG = "flag"


def local_path(text: str) -> str:
    """An argparse type: a path on this machine, `~` expanded (a config file's paths see no shell)."""
    return os.path.expanduser(text)


def octal(text: str) -> int:
    """An argparse type: file permissions in octal (600, 0660)."""
    try:
        return int(text, 8)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not octal permissions such as 600 or 660") from None


def serve_groups() -> tuple[Group, ...]:
    """The settings of a server, one group per table of the config file."""
    from predictor.service.limits import Limits
    from predictor.service.server import DEFAULT_ESTIMATOR, DEFAULT_LISTEN, DEFAULT_SOCKET_MODE

    served = (
        Option(
            "--listen", "TCP address or Unix socket to listen on", default=DEFAULT_LISTEN, metavar="HOST:PORT|unix:PATH"
        ),
        Option("--state", "SQLite file that makes acknowledged completions durable", local_path, metavar="FILE"),
        Option(
            "--estimators",
            "the estimators built in every namespace (the first answers requests naming none); separated by "
            "spaces or commas",
            default=(DEFAULT_ESTIMATOR,),
            metavar="SPEC",
            kind="list",
            old=("--estimator",),
        ),
        Option("--models", "folder of trained models to serve by name", local_path, metavar="DIR"),
        Option(
            "--metrics-listen",
            "serve Prometheus metrics over HTTP at /metrics (HOST defaults to 127.0.0.1; off unless given)",
            metavar="[HOST:]PORT",
        ),
        Option(
            "--cluster",
            "the site's slurm.conf (gres.conf beside it) or a cluster TOML: ForecastStart with backfill 'slurm' "
            "runs tsched's Slurm scheduler on its nodes",
            local_path,
            metavar="FILE",
        ),
    )
    access = (
        Option("--tls-cert", "serve TLS with this certificate chain (with --tls-key)", local_path, metavar="PEM"),
        Option("--tls-key", "the certificate's private key", local_path, metavar="PEM"),
        Option(
            "--tls-client-ca", "require client certificates signed by this CA (mutual TLS)", local_path, metavar="PEM"
        ),
        Option(
            "--tokens",
            "admit only calls bearing a token of FILE (lines: TOKEN GLOB[,GLOB...] [reset]); SIGHUP reloads it",
            local_path,
            metavar="FILE",
        ),
        Option(
            "--insecure", "allow listening off this machine with neither TLS nor tokens", default=False, kind="flag"
        ),
        Option(
            "--socket-mode",
            f"permissions of a unix: socket: who may connect (default: {DEFAULT_SOCKET_MODE:o})",
            octal,
            DEFAULT_SOCKET_MODE,
            "OCTAL",
        ),
    )
    bounds = tuple(limit_option(item) for item in dataclasses.fields(Limits))
    return (
        Group("what to serve (the top level of a --config file)", served, section=""),
        Group("who may connect (docs/service-operations.md; [security] of a --config file)", access, "security"),
        Group("bounds (each default suits a site's server; [limits] of a --config file)", bounds, "limits"),
    )


def limit_option(item: dataclasses.Field[Any]) -> Option:
    """A field of `Limits` as an option (`max_calls` -> `--max-calls`), its help the field's own documentation."""
    name = "--" + item.name.replace("_", "-")
    doc = item.metadata["doc"]
    if isinstance(item.default, tuple):
        return Option(name, f"{doc}; several separated by spaces", default=item.default, metavar="SPEC", kind="list")
    return Option(name, doc, type(item.default), item.default, LIMIT_METAVARS[type(item.default)])


#: What a bound's value is, by its type: every float of `Limits` is seconds, every string a duration (400d).
LIMIT_METAVARS = {int: "N", float: "SECONDS", str: "DURATION"}


def serve_table() -> Table:
    return (
        Option(
            "--config",
            "TOML file of settings: the options below without dashes (a top level, [security] and [limits]); "
            "flags override it",
            local_path,
            metavar="FILE",
        ),
        Option("--print-config", "print the effective configuration (a --config file) and exit", kind="flag"),
        *serve_groups(),
    )


@dataclass(frozen=True)
class Setting:
    """One setting of a server, its value and where the value came from (a flag, the config file, the default)."""

    section: str
    option: Option
    value: Any
    source: str | None = None

    @property
    def field(self) -> str:
        return self.option.key.replace("-", "_")


def effective_settings(args: argparse.Namespace) -> list[Setting]:
    """Every setting: flags over the file over the defaults."""
    from_file = read_config(args.config) if args.config else {}
    settings = []
    for group in serve_groups():
        section = group.section or ""
        for option in group.options:
            setting = Setting(section, option, option.default)
            if (section, option.key) in from_file:
                setting = dataclasses.replace(setting, value=from_file[section, option.key], source=args.config)
            if hasattr(args, setting.field):
                setting = dataclasses.replace(setting, value=getattr(args, setting.field), source=FLAG)
            settings.append(setting)
    return settings


def read_config(path: str) -> dict[tuple[str, str], Any]:
    """A config file's settings by (table, key), each checked: an unknown table or key, or a value of the wrong
    type, is refused naming the file and the key."""
    try:
        with open(path, "rb") as file:
            document = tomllib.load(file)
    except OSError as error:
        raise UsageError(f"--config {path}: cannot read it: {error.strerror}") from None
    except tomllib.TOMLDecodeError as error:
        raise UsageError(f"{path}: not TOML: {error}") from None
    known = {group.section or "": {option.key: option for option in group.options} for group in serve_groups()}
    tables = {"": {key: value for key, value in document.items() if not isinstance(value, dict)}}
    for name, table in document.items():
        if isinstance(table, dict):
            if name not in known or not name:
                raise UsageError(f"{path}: unknown table [{name}] (tables: {', '.join(n for n in known if n)})")
            tables[name] = table
    settings = {}
    for section, table in tables.items():
        for key, value in table.items():
            where = f"{path}: {f'[{section}] ' if section else ''}{key}"
            option = known[section].get(key)
            if option is None:
                raise UsageError(f"{where}: unknown key{_suggestion(key, section, known)}")
            settings[section, key] = _checked(option, section, value, where, Path(path).absolute().parent)
    return settings


def _suggestion(key: str, section: str, known: Mapping[str, Mapping[str, Option]]) -> str:
    """Where a mistyped or misplaced key belongs, if it looks like one the server knows."""
    tables = {name: table for table, options in known.items() for name in options}
    close = difflib.get_close_matches(key.replace("_", "-"), list(tables), n=1)
    if not close:
        return f" (keys here: {', '.join(known[section])})"
    table = tables[close[0]]
    place = "" if table == section else f" in [{table}]" if table else " at the top level"
    return f" (did you mean {close[0]}{place}?)"


_EXPECTED = {int: "a whole number", float: "a number", octal: 'octal permissions (0o660, or "660")'}


def _checked(option: Option, section: str, value: Any, where: str, folder: Path) -> Any:
    """A file's value as the option's type, or a UsageError naming file and key."""
    if option.kind == "list":
        ok, expected = isinstance(value, list) and all(isinstance(item, str) for item in value), "a list of strings"
    elif option.kind == "flag":
        ok, expected = isinstance(value, bool), "true or false"
    else:
        ok, value = _typed(option.type, value)
        expected = _EXPECTED.get(option.type, "a string")
    if not ok:
        raise UsageError(f"{where}: expected {expected}, not {value!r}")
    if option.type is local_path:
        value = str(folder / local_path(value))
    if section == "limits":
        _check_limit(option, value, where)
    return value


def _typed(kind: Any, value: Any) -> tuple[bool, Any]:
    """Whether a TOML value fits an option of type `kind`, and the value as that type."""
    if isinstance(value, bool):
        return False, value
    if kind in (int, octal) and isinstance(value, int):
        return True, value
    if kind is float and isinstance(value, int | float):
        return True, float(value)
    if kind is octal and isinstance(value, str):
        try:
            return True, octal(value)
        except argparse.ArgumentTypeError:
            return False, value
    return isinstance(value, str) and kind not in (int, float), value


def _check_limit(option: Option, value: Any, where: str) -> None:
    from predictor.service.limits import Limits

    try:
        Limits(**{option.key.replace("-", "_"): value})
    except UsageError as error:
        raise UsageError(f"{where}: {error}") from None


def format_settings(settings: list[Setting], config: str | None) -> str:
    """The effective configuration as a file `--config` reads back, each value not a default marked with where
    it came from."""
    layers = f"flags over {config} over the defaults" if config else "flags over the defaults"
    lines = [f"# tsched serve: the effective configuration ({layers})"]
    section = ""
    for setting in settings:
        if setting.section != section:
            section = setting.section
            lines.append(f"\n[{section}]")
        origin = (
            ""
            if setting.source is None
            else f"  # {'--' + setting.option.key if setting.source == FLAG else 'the file'}"
        )
        if setting.value is None:
            lines.append(f"# {setting.option.key}: unset")
        else:
            lines.append(f"{setting.option.key} = {_toml(setting.option, setting.value)}{origin}")
    return "\n".join(lines)


def _toml(option: Option, value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if option.type is octal:
        return f"0o{value:o}"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    return "[" + ", ".join(json.dumps(item, ensure_ascii=False) for item in value) + "]"


def cmd_serve(args: argparse.Namespace) -> int:
    from predictor.service.server import serve
    from simulator.estimators import with_simulated
    from simulator.evaluation.plan import split_specs

    settings = effective_settings(args)
    text = format_settings(settings, args.config)
    values = {setting.field: setting.value for setting in settings}
    security, limits = security_and_limits(settings)
    if args.print_config:
        print(text)
        return 0
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    log.info("%s", text)
    forecaster = start_forecaster(values["cluster"])
    serve(
        listen=values["listen"],
        state=values["state"],
        default_estimators=split_specs(values["estimators"]),
        models_dir=values["models"],
        security=security,
        limits=limits,
        metrics_listen=values["metrics_listen"],
        start_forecaster=forecaster,
        extend_factory=with_simulated,
    )


def start_forecaster(cluster: str | None) -> StartForecaster:
    """ForecastStart's forward simulation: on the cluster's nodes for backfill 'slurm' when one is given (read
    now, so that a bad file stops the start naming its line), else on a pool of the request's processors."""
    from simulator.forecast import FORWARD_SIMULATION

    if cluster is None:
        return FORWARD_SIMULATION
    from simulator.clusterconf import read_cluster
    from simulator.clusterforecast import ClusterForwardSimulation

    forward = ClusterForwardSimulation(read_cluster(cluster))
    log.info(
        "forecasts with backfill 'slurm' run on %s: %d nodes, %d CPUs",
        cluster,
        len(forward.cluster.nodes),
        forward.cluster.procs,
    )
    return forward


def security_and_limits(settings: list[Setting]) -> tuple[Security, Limits]:
    """The `[security]` and `[limits]` settings as the server takes them."""
    from predictor.service.limits import Limits
    from predictor.service.server import Security

    def fields(section: str) -> dict[str, Any]:
        chosen = (setting for setting in settings if setting.section == section)
        return {s.field: tuple(s.value) if isinstance(s.value, list) else s.value for s in chosen}

    security = Security(**fields("security"))
    security.check()
    return security, Limits(**fields("limits"))


COMMANDS = (Command("serve", "run the gRPC predictor service", cmd_serve, serve_table),)
