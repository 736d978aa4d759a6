"""`python -m service` serves the API; `python -m service demo` prepares the default encoder and index first."""

from __future__ import annotations

import argparse
import logging
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m service",
                                     description="Serve the Strata API with uvicorn. Settings come from "
                                     "STRATA_* environment variables (see README); flags override them.")
    parser.add_argument("command", nargs="?", choices=["serve", "demo", "sharded"], default="serve",
                        help="serve (default), or demo: export the default encoder and build the Quora index "
                        "if missing, then serve; or sharded: serve a `--shards N` index on Ray Serve")
    parser.add_argument("--host", help="bind address (STRATA_HOST, default 127.0.0.1)")
    parser.add_argument("--port", type=int, help="port (STRATA_PORT, default 8000)")
    parser.add_argument("--index-root", help="index root (STRATA_INDEX_ROOT)")
    parser.add_argument("--rows", type=int, default=None, help="demo: index only the first N Quora rows")
    parser.add_argument("--rebuild", action="store_true", help="demo: build a new index even if one exists")
    parser.add_argument("--replicas", type=int, default=None,
                        help="sharded: replicas per shard (STRATA_SHARD_REPLICAS)")
    parser.add_argument("--ray-address", default=None,
                        help="sharded: Ray cluster (STRATA_RAY_ADDRESS, $RAY_ADDRESS)")
    args = parser.parse_args(argv)
    import uvicorn

    from service.demo import DemoError, banner, prepare
    from service.logs import configure
    from service.main import create_app
    from service.settings import Settings

    overrides = {k: v for k, v in (("host", args.host), ("port", args.port), ("index_root", args.index_root),
                                   ("shard_replicas", args.replicas), ("ray_address", args.ray_address))
                 if v is not None}
    settings = Settings(**overrides)
    configure(settings.log_format, settings.log_level)
    if args.command == "demo":
        try:
            prepare(settings, rows=args.rows, rebuild=args.rebuild)
        except (DemoError, OSError, ValueError, RuntimeError) as exc:
            print(f"demo: error: {exc}", file=sys.stderr)
            return 2
    if args.command == "sharded":  # Ray Serve owns the HTTP server here (its proxy), same API
        from service.sharded import run_sharded

        run_sharded(settings.index_root, host=settings.host, port=settings.port, address=settings.ray_address,
                    replicas=settings.shard_replicas, threads=settings.threads)
        return 0
    logging.getLogger(__name__).info(banner(settings))
    # log_config=None: uvicorn's loggers go through our (JSON) root handler; SIGTERM lets in-flight requests
    # finish for up to shutdown_timeout_s before the lifespan closes the engine.
    uvicorn.run(create_app(settings), host=settings.host, port=settings.port, log_level=settings.log_level,
                log_config=None, access_log=False, timeout_graceful_shutdown=settings.shutdown_timeout_s)
    return 0


if __name__ == "__main__":
    sys.exit(main())
