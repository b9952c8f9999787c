"""`python -m muster.devtools.apiserver --port N`: serve the stand-in until interrupted."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys

from muster.devtools.apiserver.resources import builtin_resources, default_resources
from muster.devtools.apiserver.server import ApiServer


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m muster.devtools.apiserver", description=__doc__
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port (printed)")
    parser.add_argument("--bookmark-interval", type=float, default=5.0, metavar="SECONDS")
    parser.add_argument(
        "--history",
        type=int,
        default=10_000,
        metavar="CHANGES",
        help="changes kept for watch resumes",
    )
    parser.add_argument(
        "--bare", action="store_true", help="built-in resources only (no Kueue or PodGroup CRDs)"
    )
    parser.add_argument(
        "--job-controller",
        action="store_true",
        help="run the stand-in's Job controller (pods for unsuspended Jobs, Job conditions)",
    )
    return parser.parse_args(argv)


async def serve(args: argparse.Namespace) -> None:
    server = ApiServer(
        host=args.host,
        port=args.port,
        resources=builtin_resources() if args.bare else default_resources(),
        history_limit=args.history,
        bookmark_interval_s=args.bookmark_interval,
        job_controller=args.job_controller,
    )
    async with server:
        print(f"serving the Kubernetes API stand-in at {server.url}", flush=True)
        await asyncio.Event().wait()


def main(argv: list[str] | None = None) -> int:
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(parse_args(argv)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
