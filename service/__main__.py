"""`python -m service` serves the API; `python -m service demo` prepares the default encoder and index first."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from service.settings import Settings


def _rows(value: str) -> int:
    """argparse type of `demo --rows`: a count of at least 1, refused as the `indexer` CLIs refuse theirs (the build
    pipeline's own argument types stay out of `service`)."""
    n = int(value)
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, not {n}")
    return n


def _parser() -> argparse.ArgumentParser:
    """`python -m service`'s subcommands (serve, demo, sharded) and their flags."""
    parser = argparse.ArgumentParser(prog="python -m service",
                                     description="Serve the Strata API with uvicorn. Settings come from "
                                     "STRATA_* environment variables (see docs/operations.md#settings); "
                                     "flags override them.")
    parser.add_argument("command", nargs="?", choices=["serve", "demo", "sharded"], default="serve",
                        help="serve (default), or demo: export the default encoder and build the Quora index "
                        "if missing, then serve; or sharded: serve a `--shards N` index whose shards are Ray Serve "
                        "deployments (same API)")
    parser.add_argument("--host", help="bind address (STRATA_HOST, default 127.0.0.1)")
    parser.add_argument("--port", type=int, help="port (STRATA_PORT, default 8000)")
    parser.add_argument("--index-root", help="index root (STRATA_INDEX_ROOT)")
    parser.add_argument("--rows", type=_rows, default=None, help="demo: index only the first N Quora rows")
    parser.add_argument("--rebuild", action="store_true", help="demo: build a new index even if one exists")
    parser.add_argument("--train", action=argparse.BooleanOptionalAction, default=None,
                        help="demo (on by default; --no-train skips it): while serving, adapt the encoder to Quora in "
                        "the background at the lowest CPU priority (`encoder adapt`, ~45 min on 2 cores, resumable) "
                        "and index with it; the API swaps to that index only if its gates pass. Progress with ETA "
                        "in /ready")
    parser.add_argument("--replicas", type=int, default=None,
                        help="sharded: replicas per shard (STRATA_SHARD_REPLICAS)")
    parser.add_argument("--ray-address", default=None,
                        help="sharded: Ray cluster (STRATA_RAY_ADDRESS, $RAY_ADDRESS)")
    return parser


def _settings(args: argparse.Namespace) -> Settings | None:
    """The settings: STRATA_* overridden by the flags given; None (the reason printed) when one is invalid."""
    from pydantic import ValidationError
    from pydantic_settings import SettingsError

    from service.settings import Settings, settings_error

    overrides = {k: v for k, v in (("host", args.host), ("port", args.port), ("index_root", args.index_root),
                                   ("shard_replicas", args.replicas), ("ray_address", args.ray_address))
                 if v is not None}
    if args.command == "sharded":  # the same app and API; the engine's backend serves the shards on Ray
        overrides["engine"] = "sharded"
    try:  # every setting is checked before anything is loaded or served
        return Settings(**overrides)
    except (ValidationError, SettingsError) as exc:
        flags = {field: "--" + field.replace("_", "-") for field in overrides if field != "engine"}
        flags |= {"shard_replicas": "--replicas"} if "shard_replicas" in overrides else {}
        print(f"python -m service: error: {settings_error(exc, flags)}", file=sys.stderr)
        return None


def _announce(settings: Settings) -> None:
    """Said once the port is bound: a port already taken gets the bind error alone."""
    from service.demo import banner, curl_example

    if settings.log_format == "json":
        # JSON asked for by name (the image, a log shipper): every line of the output is JSON, the curl line a field
        logging.getLogger("service").info("serving on http://%s:%s", settings.host, settings.port,
                                          extra={"try": curl_example(settings)})
    else:
        # text or auto: a banner to read and a curl line to paste as it is, plain text on stdout
        print(banner(settings), flush=True)  # says "serving" once: no log line repeats it


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    from service.demo import DemoError, finish_report, prepare
    from service.logs import configure

    settings = _settings(args)
    if settings is None:
        return 2
    configure(settings.log_format, settings.log_level)  # and STRATA_LOG_FORMAT for the demo's child processes
    if args.train is not None and args.command != "demo":
        parser.error("--train/--no-train apply to demo")
    train = args.command == "demo" and args.train is not False  # the demo trains unless told not to
    training = report = None
    if args.command == "demo":
        try:
            report = prepare(settings, rows=args.rows, rebuild=args.rebuild)
            if train:
                from service.demo import BackgroundTraining, training_plan

                plan = training_plan(settings, rows=args.rows)
                settings = settings.model_copy(update={"training_status": plan.chain_file})
                training = BackgroundTraining(plan)
        except (DemoError, OSError, ValueError, RuntimeError) as exc:
            print(f"demo: error: {exc}", file=sys.stderr)
            return 2
    if training is not None:
        training.start()
    served = settings
    try:
        return serve(served, lambda: _announce(served))
    finally:
        if training is not None:
            training.stop()
        finish_report(report)


def serve(settings: Settings, announce: Callable[[], None] | None = None) -> int:
    """Serve until SIGTERM or SIGINT; in-flight requests get up to `shutdown_timeout_s` to finish before the
    lifespan closes the engine. `announce` runs once the port is bound and the app started. A clean shutdown exits
    0, a failed startup 3 (uvicorn's code; a port already taken: 1)."""
    import signal

    import uvicorn

    from service.auth import KeyConfigError
    from service.engine.registry import CollectionsConfigError
    from service.engine.tracing import TracingConfigError
    from service.main import create_app

    try:
        app = create_app(settings)
    except (TracingConfigError, CollectionsConfigError, KeyConfigError) as exc:
        print(f"python -m service: error: {exc}", file=sys.stderr)
        return 2
    # log_config=None: uvicorn's loggers go through our (JSON) root handler.
    config = uvicorn.Config(app, host=settings.host, port=settings.port,
                            log_level=settings.log_level, log_config=None, access_log=False,
                            timeout_graceful_shutdown=settings.shutdown_timeout_s)

    class Announcing(uvicorn.Server):
        """uvicorn's server, saying it serves once its socket is bound (after the lifespan's startup; uvicorn
        exits on a bind error before this)."""

        async def startup(self, sockets: list[Any] | None = None) -> None:
            await super().startup(sockets)
            if self.started and not self.should_exit and announce is not None:
                announce()

    server = Announcing(config)
    # uvicorn re-raises the signal that stopped it once it has shut down cleanly; with these handlers in place
    # that re-raise is a no-op and the process exits 0 instead of dying of the signal.
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda signum, frame: None)
    server.run()
    return 0 if server.started else 3


if __name__ == "__main__":
    sys.exit(main())
