"""The processes of ``fedbandits serve silo`` and ``fedbandits serve server``."""

from __future__ import annotations

import argparse
import ipaddress
import logging
import signal
import sys
import threading
from pathlib import Path
from typing import Any

import uvicorn

from fedbandits.config import load_config
from fedbandits.serve.coordinator import Coordinator
from fedbandits.serve.http import Service
from fedbandits.serve.links import HttpLink
from fedbandits.serve.server_http import federation_app
from fedbandits.serve.silo import ServingSilo


def read_token(path: Path, name: str) -> str:
    try:
        token = path.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise ValueError(f"{name}: cannot read {path} ({exc.strerror})") from None
    if len(token) < 16:
        raise ValueError(f"{name}: the token in {path} must be at least 16 characters")
    return token


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def listen_options(args: argparse.Namespace) -> dict[str, Any]:
    """uvicorn's options for --host/--port/--tls-*: TLS required off loopback unless --insecure-http."""
    if (args.tls_cert is None) != (args.tls_key is None):
        raise ValueError("--tls-cert and --tls-key go together")
    tls = args.tls_cert is not None
    if not tls and not is_loopback(args.host) and not args.insecure_http:
        raise ValueError(
            f"--host {args.host}: off loopback the service needs --tls-cert/--tls-key "
            "(or --insecure-http if TLS ends in front of it)"
        )
    if not 0 < args.port < 65536:
        raise ValueError(f"--port must be in [1, 65535], got {args.port}")
    # keep-alive well above clients' usual idle expiry (httpx: 5 s, uvicorn's default too), so that a client
    # never sends on a connection the server is closing
    options: dict[str, Any] = {
        "host": args.host,
        "port": args.port,
        "log_level": "warning",
        "access_log": False,
        "timeout_keep_alive": 30,
    }
    if tls:
        options.update(ssl_certfile=str(args.tls_cert), ssl_keyfile=str(args.tls_key))
    return options


def run_silo(args: argparse.Namespace) -> int:
    options = listen_options(args)
    tls = "ssl_certfile" in options
    if args.sync_seconds is not None and not args.sync_seconds > 0:
        raise ValueError(f"--sync-seconds must be > 0, got {args.sync_seconds}")
    token = read_token(args.token_file, "--token-file")
    sync_token = read_token(args.sync_token_file, "--sync-token-file")
    if token == sync_token:
        raise ValueError("--token-file and --sync-token-file must hold different tokens")
    config = load_config(args.config)
    silo = ServingSilo(
        config,
        args.state_dir,
        entry=args.entry,
        silo=args.silo,
        expiry_seconds=args.expiry_seconds,
        policy=args.budget_policy,
        durability=args.durability,
        allow_unprivatized=args.allow_unprivatized,
    )
    service = Service(silo, token, sync_token, args.sync_seconds)
    scheme = "https" if tls else "http"
    print(
        f"serving silo {args.silo} ({silo.setup.label}) on {scheme}://{args.host}:{args.port} "
        f"(event log {args.state_dir}, {silo.replayed} events replayed)",
        flush=True,
    )
    try:
        uvicorn.run(service.app, **options)
    finally:
        silo.close()
    return 0


def run_server(args: argparse.Namespace) -> int:
    sync_token = read_token(args.sync_token_file, "--sync-token-file")
    options = None
    view_token = ""
    if args.port is not None:
        options = listen_options(args)
        if args.token_file is None:
            raise ValueError("--port: the status API needs --token-file (a viewing token)")
        view_token = read_token(args.token_file, "--token-file")
        if view_token == sync_token:
            raise ValueError("--token-file and --sync-token-file must hold different tokens")
    elif args.token_file is not None:
        raise ValueError("--token-file is the status API's token: it goes with --port")
    for url in args.silo_url:
        host = url.split("://", 1)[-1].split("/", 1)[0].rsplit(":", 1)[0].strip("[]")
        if url.startswith("http://") and not is_loopback(host):
            raise ValueError(f"--silo-url {url}: off loopback the silos must be reached over https")
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"--silo-url {url}: must start with http:// or https://")
    coordinator = Coordinator(
        load_config(args.config),
        HttpLink(list(args.silo_url), sync_token, verify=str(args.ca) if args.ca else True),
        args.state_dir,
        entry=args.entry,
        sync_seconds=args.sync_seconds,
        policy=args.budget_policy,
    )
    logging.basicConfig(level=logging.WARNING, format="fedbandits serve server: %(message)s", stream=sys.stderr)
    where = "" if options is None else f"; status and dashboard on port {args.port}"
    print(
        f"syncing {len(args.silo_url)} silos every {args.sync_seconds:g} s from round "
        f"{coordinator.epoch}.{coordinator.round} (state {args.state_dir}{where})",
        flush=True,
    )
    try:
        if options is None:
            signal.signal(signal.SIGTERM, lambda *_: coordinator.stop())
            coordinator.run()
        else:  # the rounds in a thread, the status API in this one (uvicorn stops on SIGTERM and SIGINT)
            rounds = threading.Thread(target=coordinator.run, name="sync-rounds", daemon=True)
            rounds.start()
            uvicorn.run(federation_app(coordinator, view_token), **options)
            coordinator.stop()
            rounds.join(timeout=30.0)
    except KeyboardInterrupt:
        pass
    finally:
        coordinator.stop()
        coordinator.close()
    return 0
