"""``fedbandits serve``: run a silo's decision service, the federation's sync schedule, or the demo.

    fedbandits serve silo CONFIG.toml --silo I --state-dir DIR --token-file F --sync-token-file F
        [--entry LABEL] [--host 127.0.0.1] [--port 8700] [--tls-cert C --tls-key K] [--insecure-http]
        [--expiry-seconds S] [--budget-policy stop|renew] [--durability process|fsync]
        [--sync-seconds N] [--allow-unprivatized] [--log-candidates]
        [--superlink HOST:PORT --superlink-ca CA.pem --node-key silo-<I>]
        [--shuffler HOST:PORT --shuffler-ca CA.pem --shuffler-cert C --shuffler-key K]   (sdp-amplification)
        [--signing-key K --signing-cert C --signing-ca CA.pem]   (distributed-dp)
    fedbandits serve server CONFIG.toml --state-dir DIR [--entry LABEL] [--sync-seconds 10]
        [--budget-policy stop|renew]
        (--silo-url URL [--silo-url URL ...] --sync-token-file F [--ca CA.pem]
         | --flower --certs DIR [--superlink-host H] [--superlink-port P] [--round-timeout S])
        [--port P --token-file F [--host 127.0.0.1] [--tls-cert C --tls-key K] [--insecure-http]]
        [--shuffler HOST:PORT --shuffler-ca CA.pem --shuffler-cert C --shuffler-key K]   (sdp-amplification)
    fedbandits serve migrate --from DIR|URL --to URL|DIR
    fedbandits serve demo [--seconds 120] [--rate 4] [--silos N] [--seed S] [--workdir DIR] [--flower | --replicas N]

The server reaches the silos either over HTTPS (``--silo-url``, with the federation's sync token)
or through the Flower deployment of ``fedbandits deploy`` (``--flower``; each silo runs with
``--superlink`` and its SuperNode key; :mod:`fedbandits.federation.serving_deployment`).

Off loopback a silo refuses to listen without TLS unless ``--insecure-http`` says the operator
terminates TLS elsewhere.  Tokens are read from files (never from the command line, which other
users of the machine can see).  Needs ``pip install 'fedbandits[serve]'``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from fedbandits.serve.options import DURABILITY, POLICIES

# starlette, uvicorn and httpx (the serve extra) are imported by the modules the subcommands run
# (fedbandits.cli.serve_run, fedbandits.serve.demo): every `fedbandits` command builds this parser, and
# the extra may be absent.


def add_serve_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:  # type: ignore[type-arg]
    p = subparsers.add_parser(
        "serve",
        help="a silo's durable decision service (HTTP), the federation's sync schedule, the demo",
        description="Live decisions over HTTP with a durable event log (needs `pip install 'fedbandits[serve]'`; "
        "docs/serving.md).",
    )
    sub = p.add_subparsers(dest="serve_command", metavar="MODE", required=True)
    _silo_flags(sub.add_parser("silo", help="one silo's decision service"))
    migrate = sub.add_parser(
        "migrate",
        help="move a silo's event log to another store (SQLite to PostgreSQL, or back)",
        description="Copy a stopped silo's event log, every row with its numbers, into an empty log "
        "(docs/serving.md, moving to PostgreSQL).",
    )
    migrate.add_argument(
        "--from", dest="source", required=True, metavar="DIR|URL", help="a stopped silo's --state-dir or URL"
    )
    migrate.add_argument("--to", dest="target", required=True, metavar="URL|DIR", help="an empty database or folder")
    server = sub.add_parser("server", help="the federation's wall-clock sync rounds")
    server.add_argument("config", type=Path, metavar="CONFIG.toml")
    server.add_argument(
        "--silo-url",
        action="append",
        help="a silo's base URL, in silo order (HTTPS link); a silo's replicas: their URLs joined by commas",
    )
    server.add_argument("--entry")
    server.add_argument("--state-dir", type=Path, required=True)
    server.add_argument("--sync-token-file", type=Path, help="the federation's token (HTTPS link)")
    server.add_argument(
        "--flower", action="store_true", help="sync through a Flower deployment (SuperLink, authenticated SuperNodes)"
    )
    server.add_argument(
        "--certs", type=Path, help="with --flower: ca.pem, server.pem, server.key and every silo-<i>.pub"
    )
    server.add_argument("--superlink-host", help="with --flower: the SuperLink's address (default 127.0.0.1)")
    server.add_argument("--superlink-port", type=int, help="with --flower: its port (default: a free one, kept)")
    server.add_argument(
        "--round-timeout", type=float, help="with --flower: how long a phase waits for the silos (default 20 s)"
    )
    _shuffler_flags(server, "server-client")
    server.add_argument("--sync-seconds", type=float, default=10.0)
    server.add_argument("--budget-policy", choices=POLICIES, default="stop")
    server.add_argument("--ca", type=Path, help="CA certificate to verify the silos' TLS (default: the system's)")
    server.add_argument("--port", type=int, help="serve the status API and dashboard on this port (needs --token-file)")
    server.add_argument("--host", default="127.0.0.1", help="the status API's address (default 127.0.0.1)")
    server.add_argument("--token-file", type=Path, help="file holding the status API's viewing token")
    server.add_argument("--tls-cert", type=Path)
    server.add_argument("--tls-key", type=Path)
    server.add_argument("--insecure-http", action="store_true", help="allow plain HTTP off loopback")
    demo = sub.add_parser(
        "demo", help="federated and lone serving silos (20 each) + server + traffic on 127.0.0.1, 2 minutes"
    )
    demo.add_argument("--seconds", type=float, default=120.0, help="how long the traffic runs (default 120)")
    demo.add_argument(
        "--config",
        type=Path,
        metavar="CONFIG.toml",
        help="a gaussian-sphere config with entries labelled 'fed' (fedlinucb) and 'alone' (linucb-independent) "
        "(default: the embedded one, 20 silos, distributed-dp)",
    )
    demo.add_argument("--workdir", type=Path, help="keep tokens, logs and event logs here (default: temporary)")
    demo.add_argument("--rate", type=float, default=4.0, help="users per second per silo (default 4)")
    demo.add_argument("--silos", type=int, help="silos per line (default: the config's agents, 20; 3 with --flower)")
    demo.add_argument("--seed", type=int, help="seed of the users, theta* and rewards (default: the config's)")
    demo.add_argument(
        "--replicas",
        type=int,
        default=1,
        help="serve each federated silo with N replicas on a throwaway PostgreSQL server (Debian's postgresql; "
        "6 silos per line unless --silos; one replica killed half-way and restarted)",
    )
    demo.add_argument(
        "--flower",
        action="store_true",
        help="sync through a Flower deployment (SuperLink, SuperNodes; needs fedbandits[deploy]) instead of HTTPS",
    )
    return p


def _silo_flags(silo: argparse.ArgumentParser) -> None:
    """``serve silo``'s options."""
    silo.add_argument("config", type=Path, metavar="CONFIG.toml")
    silo.add_argument("--silo", type=int, default=0, help="this silo's index in [0, agents)")
    silo.add_argument("--entry", help="label of the [[algorithms]] entry to serve (default: the first)")
    silo.add_argument("--state-dir", type=Path, required=True, help="the event log's folder (kept across restarts)")
    silo.add_argument("--token-file", type=Path, required=True, help="file holding the traffic bearer token")
    silo.add_argument("--sync-token-file", type=Path, required=True, help="file holding the federation's token")
    silo.add_argument("--host", default="127.0.0.1")
    silo.add_argument("--port", type=int, default=8700)
    silo.add_argument("--tls-cert", type=Path)
    silo.add_argument("--tls-key", type=Path)
    silo.add_argument("--insecure-http", action="store_true", help="allow plain HTTP off loopback")
    silo.add_argument("--expiry-seconds", type=float, default=86400.0)
    silo.add_argument("--budget-policy", choices=POLICIES, default="stop")
    silo.add_argument("--durability", choices=sorted(DURABILITY), default="process", help="the SQLite log's")
    silo.add_argument(
        "--store",
        metavar="URL",
        help="the event log in PostgreSQL, shared by this silo's replicas: postgresql://ROLE@HOST[:PORT]/DATABASE, "
        "one database per silo, its password in ~/.pgpass (default: SQLite in --state-dir; docs/serving.md)",
    )
    silo.add_argument("--sync-seconds", type=float, help="the server's schedule (to report an unreachable server)")
    silo.add_argument("--allow-unprivatized", action="store_true", help="opt in to protocol 'none'")
    silo.add_argument(
        "--log-candidates",
        action="store_true",
        help="keep every decision's candidate features in the event log (for fedbandits evaluate; they stay here)",
    )
    silo.add_argument(
        "--superlink", metavar="HOST:PORT", help="sync through the Flower deployment: the server's SuperLink"
    )
    silo.add_argument("--superlink-ca", type=Path, help="with --superlink: the deployment's CA certificate")
    silo.add_argument("--node-key", type=Path, help="with --superlink: this silo's SuperNode key (silo-<i>)")
    _shuffler_flags(silo, "silo-<i>-client")
    silo.add_argument("--signing-key", type=Path, help="distributed-dp: this silo's signing key (silo-<i>-signing.key)")
    silo.add_argument("--signing-cert", type=Path, help="distributed-dp: its certificate (silo-<i>-signing.pem)")
    silo.add_argument("--signing-ca", type=Path, help="distributed-dp: the silos' signing CA (signing-ca.pem)")


def _shuffler_flags(parser: argparse.ArgumentParser, identity: str) -> None:
    """sdp-amplification: the deployment's shuffler party and this party's mutual-TLS credentials for it."""
    parser.add_argument("--shuffler", metavar="HOST:PORT", help="sdp-amplification: the shuffler party")
    parser.add_argument("--shuffler-ca", type=Path, help="with --shuffler: the shuffler hop's CA (shuffler-ca.pem)")
    parser.add_argument(
        "--shuffler-cert", type=Path, help=f"with --shuffler: this party's certificate ({identity}.pem)"
    )
    parser.add_argument("--shuffler-key", type=Path, help=f"with --shuffler: its key ({identity}.key)")


def run_serve(args: argparse.Namespace) -> int:
    try:
        import httpx  # noqa: F401
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ModuleNotFoundError as exc:
        raise ValueError(
            f"fedbandits serve needs the serve extra ({exc.name} is missing): pip install 'fedbandits[serve]'"
        ) from None
    mode = args.serve_command
    if mode == "migrate":
        from fedbandits.cli.serve_run import run_migrate

        return run_migrate(args)
    if mode == "silo":
        from fedbandits.cli.serve_run import run_silo

        return run_silo(args)
    if mode == "server":
        from fedbandits.cli.serve_run import run_server

        return run_server(args)
    if not args.seconds > 0 or not args.rate > 0:
        raise ValueError("--seconds and --rate must be > 0")
    if args.silos is not None and args.silos < 1:
        raise ValueError(f"--silos must be >= 1, got {args.silos}")
    from fedbandits.serve.demo import run_demo

    return run_demo(
        args.config, args.seconds, args.rate, args.workdir, args.flower, args.silos, args.seed, args.replicas
    )
