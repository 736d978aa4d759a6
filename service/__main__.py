"""`python -m service` serves the API; `python -m service demo` prepares the default encoder and index first."""

from __future__ import annotations

import argparse
import logging
import sys

from indexer.console import configure_logging


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m service",
                                     description="Serve the Strata API with uvicorn. Settings come from "
                                     "STRATA_* environment variables (see README); flags override them.")
    parser.add_argument("command", nargs="?", choices=["serve", "demo"], default="serve",
                        help="serve (default), or demo: export the default encoder and build the Quora index "
                        "if missing, then serve")
    parser.add_argument("--host", help="bind address (STRATA_HOST, default 127.0.0.1)")
    parser.add_argument("--port", type=int, help="port (STRATA_PORT, default 8000)")
    parser.add_argument("--index-root", help="index root (STRATA_INDEX_ROOT)")
    parser.add_argument("--rows", type=int, default=None, help="demo: index only the first N Quora rows")
    parser.add_argument("--rebuild", action="store_true", help="demo: build a new index even if one exists")
    args = parser.parse_args(argv)
    configure_logging()

    import uvicorn

    from service.demo import DemoError, banner, prepare
    from service.main import create_app
    from service.settings import Settings

    overrides = {k: v for k, v in (("host", args.host), ("port", args.port), ("index_root", args.index_root))
                 if v is not None}
    settings = Settings(**overrides)
    if args.command == "demo":
        try:
            prepare(settings, rows=args.rows, rebuild=args.rebuild)
        except (DemoError, OSError, ValueError, RuntimeError) as exc:
            print(f"demo: error: {exc}", file=sys.stderr)
            return 2
    logging.getLogger(__name__).info(banner(settings))
    uvicorn.run(create_app(settings), host=settings.host, port=settings.port, log_level=settings.log_level,
                access_log=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
