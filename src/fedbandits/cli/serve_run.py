"""The handlers of ``fedbandits serve silo`` and ``fedbandits serve server``: their options checked
(each refusal one line naming the flag), then the serving silo, the coordinator or the serving
deployment built and run.

:mod:`fedbandits.cli.serve` declares the options and imports this module only when ``fedbandits
serve`` runs (it needs the serve extra); the service itself is :mod:`fedbandits.serve` (HTTP and the
event log) over the protocol layer (:mod:`fedbandits.online`)."""

from __future__ import annotations

import argparse
import contextlib
import ipaddress
import json
import logging
import os
import signal
import ssl
import sys
import threading
from pathlib import Path
from typing import Any

import uvicorn

from fedbandits.config import Config, load_config
from fedbandits.crypto.signing import Authority, Identity, load_signing
from fedbandits.federation.flower_setup import check_quotable
from fedbandits.federation.processes import DeployError, flower_bin, hold_lock, is_loopback, take_lock
from fedbandits.federation.serving_deployment import ServeDeployment, SiloNode
from fedbandits.federation.shuffler_client import ShufflerClient, split_address
from fedbandits.federation.spec import make_spec
from fedbandits.online import AgentSetup
from fedbandits.serve.coordinator import Coordinator
from fedbandits.serve.http import Service
from fedbandits.serve.links import HttpLink
from fedbandits.serve.migrate import migrate
from fedbandits.serve.pgstore import is_url, redact
from fedbandits.serve.server_http import federation_app
from fedbandits.serve.shuffling import ServerShuffling, SiloShuffling
from fedbandits.serve.silo import ServingSilo


def read_token(path: Path, name: str) -> str:
    try:
        token = path.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise ValueError(f"{name}: cannot read {path} ({exc.strerror})") from None
    if len(token) < 16:
        raise ValueError(f"{name}: the token in {path} must be at least 16 characters")
    return token


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
    shuffler = shuffler_party(args)
    setup = ServingSilo.check(
        config, args.entry, args.silo, args.budget_policy, args.allow_unprivatized, shuffler is not None
    )
    signing = signing_identity(args, setup.masked)
    scheme = "https" if tls else "http"
    node = silo_node(args, f"{scheme}://{_local_host(args.host)}:{args.port}")  # checked before the log opens
    try:  # one serving process per state folder: a second would share the log and kill the first's SuperNode
        lock = take_lock(Path(args.state_dir), "serving silo")
    except DeployError as exc:
        raise ValueError(str(exc)) from None
    silo = ServingSilo(
        config,
        args.state_dir,
        entry=args.entry,
        silo=args.silo,
        expiry_seconds=args.expiry_seconds,
        policy=args.budget_policy,
        durability=args.durability,
        allow_unprivatized=args.allow_unprivatized,
        shuffler=shuffler is not None,
        signing=signing,
        log_candidates=args.log_candidates,
        store=args.store,
    )
    shuffling = None
    if shuffler is not None:  # bound to the deployment's spec of this config and entry (its hash)
        shuffling = SiloShuffling(shuffler, make_spec(config, setup.label).digest, args.silo)
    service = Service(
        silo, token, sync_token, args.sync_seconds, sync_from_loopback=node is not None, shuffling=shuffling
    )
    print(
        f"serving silo {args.silo} ({silo.setup.label}) on {scheme}://{args.host}:{args.port} "
        f"(event log {silo.store.where()}, {silo.replayed} events replayed)",
        flush=True,
    )
    try:
        if node is not None:
            node.start()
            print(f"syncing through the SuperLink at {args.superlink} (SuperNode log {node.state_dir})", flush=True)
        uvicorn.run(service.app, **options)
    finally:
        if node is not None:
            node.stop()
        silo.close()
        os.close(lock)
    return 0


def _local_host(host: str) -> str:
    """Where a process on this machine reaches a service listening on ``host`` (for the URL)."""
    if host in ("0.0.0.0", "localhost"):
        return "127.0.0.1"
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return host  # a name: checked by silo_node when it matters
    if ip.version == 6:  # an IPv6 listener is IPv6-only (asyncio sets IPV6_V6ONLY)
        return "[::1]" if ip.is_unspecified else f"[{host}]"
    return host


def silo_node(args: argparse.Namespace, sync_url: str) -> SiloNode | None:
    """The silo's SuperNode for ``--superlink`` (checked here, started by the caller), or None."""
    files = {"--superlink-ca": args.superlink_ca, "--node-key": args.node_key}
    if not _address_and_files("--superlink", args.superlink, files):
        return None
    if args.host != "localhost":
        try:
            ipaddress.ip_address(args.host)
        except ValueError:
            raise ValueError(
                f"--host {args.host}: with --superlink, an IP address (the SuperNode reaches it)"
            ) from None
    try:  # what goes between quotes into the SuperNode's node config
        for what, value in (
            ("--state-dir", Path(args.state_dir).resolve()),
            ("--sync-token-file", args.sync_token_file),
        ):
            check_quotable(what, value)
    except DeployError as exc:
        raise ValueError(str(exc)) from None
    _deploy_extra("flower-supernode")
    return SiloNode(
        args.superlink,
        args.superlink_ca,
        args.node_key,
        args.silo,
        args.state_dir,
        sync_url,
        args.sync_token_file,
    )


def run_migrate(args: argparse.Namespace) -> int:
    """``serve migrate``: a stopped silo's log copied into an empty one (fedbandits.serve.migrate)."""
    folder = None if is_url(args.source) else Path(args.source)
    try:  # a state folder's silo must be stopped (the lock `serve silo` holds)
        with hold_lock(folder, "serving silo") if folder and folder.is_dir() else contextlib.nullcontext():
            copied = migrate(args.source, args.target)
    except DeployError as exc:
        raise ValueError(f"{exc}: stop it before migrating its log") from None
    print(f"copied {', '.join(f'{n} {table}' for table, n in copied.items())} to {redact(args.target)}")
    return 0


def run_server(args: argparse.Namespace) -> int:
    if args.flower:
        return run_flower_server(args)
    if not args.silo_url or args.sync_token_file is None:
        raise ValueError("serve server needs --silo-url (one per silo) and --sync-token-file, or --flower")
    for flag in ("certs", "superlink_host", "superlink_port", "round_timeout"):
        if getattr(args, flag) is not None:
            raise ValueError(f"--{flag.replace('_', '-')} goes with --flower")
    sync_token = read_token(args.sync_token_file, "--sync-token-file")
    options, view_token = status_options(args, sync_token)
    shuffler = shuffler_party(args)
    for url in (u for given in args.silo_url for u in given.split(",")):  # a silo's replicas: comma-separated
        host = url.split("://", 1)[-1].split("/", 1)[0].rsplit(":", 1)[0].strip("[]")
        if url.startswith("http://") and not is_loopback(host):
            raise ValueError(f"--silo-url {url}: off loopback the silos must be reached over https")
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"--silo-url {url}: must start with http:// or https://")
    config = load_config(args.config)
    setup = Coordinator.check(config, args.entry, args.budget_policy, args.sync_seconds, shuffler is not None)
    coordinator = Coordinator(
        config,
        HttpLink(list(args.silo_url), sync_token, verify=str(args.ca) if args.ca else True),
        args.state_dir,
        entry=args.entry,
        sync_seconds=args.sync_seconds,
        policy=args.budget_policy,
        shuffling=None if shuffler is None else server_shuffling(shuffler, config, setup),
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
            uvicorn.run(federation_app(coordinator.status, view_token), **options)
            coordinator.stop()
            rounds.join(timeout=30.0)
    except KeyboardInterrupt:
        pass
    finally:
        coordinator.stop()
        coordinator.close()
    return 0


def _address_and_files(flag: str, address: str | None, files: dict[str, Path | None]) -> bool:
    """Whether ``flag`` (HOST:PORT) is given: then every one of ``files`` must be, and exist; if not,
    none of them may be."""
    if address is None:
        given = [name for name, path in files.items() if path is not None]
        if given:
            raise ValueError(f"{given[0]} goes with {flag}")
        return False
    split_address(address, flag)
    for name, path in files.items():
        if path is None:
            raise ValueError(f"{flag} needs {name}")
        if not Path(path).is_file():
            raise ValueError(f"{name}: no such file {path}")
    return True


def shuffler_party(args: argparse.Namespace) -> ShufflerClient | None:
    """The shuffler party of ``--shuffler`` with this party's mutual-TLS credentials, or None (checked)."""
    files = {
        "--shuffler-ca": args.shuffler_ca,
        "--shuffler-cert": args.shuffler_cert,
        "--shuffler-key": args.shuffler_key,
    }
    if not _address_and_files("--shuffler", args.shuffler, files):
        return None
    try:
        return ShufflerClient(args.shuffler, args.shuffler_ca, args.shuffler_cert, args.shuffler_key)
    except (OSError, ssl.SSLError) as exc:
        raise ValueError(f"--shuffler-cert/--shuffler-key/--shuffler-ca: unusable ({exc})") from None


def signing_identity(args: argparse.Namespace, masked: bool) -> tuple[Identity, Authority] | None:
    """``--signing-key/--signing-cert/--signing-ca``: required with distributed-dp, refused otherwise (checked)."""
    files = {"--signing-key": args.signing_key, "--signing-cert": args.signing_cert, "--signing-ca": args.signing_ca}
    given = [flag for flag, path in files.items() if path is not None]
    if not masked:
        if given:
            raise ValueError(f"{given[0]} is only for protocol 'distributed-dp'")
        return None
    for flag, path in files.items():
        if path is None:
            raise ValueError(f"{flag} is required with protocol 'distributed-dp' (signed secure aggregation)")
        if not path.is_file():
            raise ValueError(f"{flag}: no such file {path}")
    try:
        return load_signing(args.silo, args.signing_key, args.signing_cert, args.signing_ca)
    except ValueError as exc:
        raise ValueError(f"--signing-key/--signing-cert/--signing-ca: {exc}") from None


def status_options(args: argparse.Namespace, sync_token: str = "") -> tuple[dict[str, Any] | None, str]:
    """uvicorn's options and the viewing token of the server's status API (``--port``), or (None, "")."""
    if args.port is None:
        if args.token_file is not None:
            raise ValueError("--token-file is the status API's token: it goes with --port")
        return None, ""
    options = listen_options(args)
    if args.token_file is None:
        raise ValueError("--port: the status API needs --token-file (a viewing token)")
    view_token = read_token(args.token_file, "--token-file")
    if view_token == sync_token:
        raise ValueError("--token-file and --sync-token-file must hold different tokens")
    return options, view_token


def run_flower_server(args: argparse.Namespace) -> int:
    """``serve server --flower``: the deployment's SuperLink, the silos' keys registered, the serving
    app submitted (its ServerApp runs the coordinator); the status API reads the ServerApp's status
    file.  Stops everything it started on SIGTERM or Ctrl-C."""
    if args.silo_url or args.sync_token_file is not None or args.ca is not None:
        raise ValueError(
            "--flower reaches the silos through their SuperNodes: no --silo-url, --sync-token-file or --ca"
        )
    if args.certs is None:
        raise ValueError(
            "--flower needs --certs (ca.pem, server.pem, server.key, silo-<i>.pub: fedbandits deploy certs)"
        )
    round_timeout = 20.0 if args.round_timeout is None else args.round_timeout
    if not args.sync_seconds > 0 or not round_timeout > 0:
        raise ValueError("--sync-seconds and --round-timeout must be > 0")
    port = 0 if args.superlink_port is None else args.superlink_port
    if not 0 <= port < 65536:
        raise ValueError(f"--superlink-port must be in [0, 65535], got {port}")
    options, view_token = status_options(args)
    _deploy_extra("flower-superlink")
    dep = _serve_deployment(args, port, round_timeout)
    if args.sync_seconds < 15:
        print(
            f"note: --sync-seconds {args.sync_seconds:g}: every tick starts a ClientApp process on each silo's host "
            "(about 2 s of CPU); 15 s or more is advised (docs/serving.md)",
            file=sys.stderr,
        )
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())

    def status() -> dict[str, Any]:
        try:
            return json.loads(dep.status_file.read_text())  # type: ignore[no-any-return]
        except (OSError, ValueError):
            return {"open_round": None, "history": [], "starting": True}

    web = None
    with dep:
        dep.status_file.unlink(missing_ok=True)  # an earlier run's status is not this one's
        try:
            dep.start()
        except DeployError as exc:
            raise ValueError(str(exc)) from None
        print(
            f"syncing {dep.spec.silos} silos every {args.sync_seconds:g} s through the SuperLink on "
            f"{args.superlink_host}:{dep.port} (TLS, SuperNode auth; run {dep.run_id}, state {dep.state})",
            flush=True,
        )
        if options is not None:
            web = uvicorn.Server(uvicorn.Config(federation_app(status, view_token), **options))
            threading.Thread(target=web.run, name="federation-status", daemon=True).start()
        try:
            # no tick for this long: the ServerApp is gone or stuck (a tick is at most a few phases of round_timeout)
            dep.watch(stop, args.sync_seconds + 5 * round_timeout + 60)
        except KeyboardInterrupt:
            pass
        finally:
            if web is not None:
                web.should_exit = True
    return 0


def _serve_deployment(args: argparse.Namespace, port: int, round_timeout: float) -> ServeDeployment:
    """The serving deployment the arguments describe, checked before anything is created."""
    config = load_config(args.config)
    shuffler = shuffler_party(args)
    setup = Coordinator.check(config, args.entry, args.budget_policy, args.sync_seconds, shuffler is not None)
    spec = make_spec(config, setup.label)
    need = ["ca.pem", "server.pem", "server.key", *(f"silo-{i}.pub" for i in range(spec.silos))]
    missing = [name for name in need if not (args.certs / name).is_file()]
    if missing:  # before anything is created in the work folder
        raise ValueError(f"--certs lacks {', '.join(missing)} (in {args.certs}; `fedbandits deploy certs` makes them)")
    return ServeDeployment(
        args.state_dir,
        spec,
        certs=args.certs,
        host=args.superlink_host or "127.0.0.1",
        port=port,
        config_file=args.config,
        entry=args.entry or "",
        sync_seconds=args.sync_seconds,
        policy=args.budget_policy,
        round_timeout=round_timeout,
        shuffler=args.shuffler,
        shuffler_files=None if shuffler is None else (args.shuffler_ca, args.shuffler_cert, args.shuffler_key),
    )


def server_shuffling(party: ShufflerClient, config: Config, setup: AgentSetup) -> ServerShuffling:
    """The coordinator's side of the shuffler, bound to the deployment's spec (its hash)."""
    return ServerShuffling(party, make_spec(config, setup.label).digest, setup.width, setup.silos)


def _deploy_extra(binary: str) -> None:
    """A one-line error now, rather than a dead child process later, without the deploy extra."""
    try:
        flower_bin(binary)
    except DeployError as exc:
        raise ValueError(str(exc)) from None
