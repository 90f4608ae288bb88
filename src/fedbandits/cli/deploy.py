"""``fedbandits deploy``: run Private-FedLinUCB as a real federation on Flower.

    fedbandits deploy local [--config CONFIG.toml] [--silos M] [--workdir DIR] [--algorithm LABEL] [--check-parity]
    fedbandits deploy certs --out DIR --silos M [--host HOST ...]
    fedbandits deploy server --config CONFIG.toml --creds DIR --workdir DIR [--host 127.0.0.1] [--port 9092]
    fedbandits deploy silo --superlink HOST:PORT --silo-id I --config CONFIG.toml --ca CA.pem --key silo-I
        --state-dir DIR [--runtime-port PORT] [--data FILE]
        [--shuffler HOST:PORT --tls-cert silo-I-client.pem --tls-key ...]
    fedbandits deploy shuffler --config CONFIG.toml --listen HOST:PORT --ca CA.pem --cert shuffler.pem
        --key shuffler.key --state-dir DIR

``local`` starts a SuperLink, one SuperNode per silo and the app on 127.0.0.1 (TLS, SuperNode
authentication), prints the simulator's summary table and stops every process it started.
``certs`` creates a trial CA, the server certificate and the silo keys; ``server`` runs the server
side on its own machine (SuperLink, registration of the silos' keys, the app; it waits for the silos,
prints the summary and stops its processes; run it again with the same work folder to resume);
``silo`` runs one silo's SuperNode on its own machine, optionally on its own data file;
``shuffler`` runs the shuffler party of ``sdp-amplification`` (mutual TLS; ``local`` starts one).
"""

from __future__ import annotations

import argparse
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from fedbandits.config import ConfigError, load_config
from fedbandits.federation.spec import DeploySpec, make_spec, spec_from_json
from fedbandits.federation.supervisor import supervise

# The rest of the deployment (certificates with cryptography, the TLS and HTTP servers, process
# control around Flower) is imported inside the subcommands that use it: every `fedbandits`
# command builds this parser, and only `fedbandits deploy` should pay for those (CLI start-up time).

#: the embedded default of ``deploy local`` (no ``--config``)
TRIAL_CONFIG = Path(__file__).parents[1] / "federation" / "trial.toml"  # the embedded trial, beside the deployment


def add_deploy_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:  # type: ignore[type-arg]
    p = subparsers.add_parser(
        "deploy",
        help="run the federation for real on Flower (server and silos as processes, TLS, authentication)",
        description="Cross-silo deployment on Flower (needs `pip install 'fedbandits[deploy]'`).",
    )
    sub = p.add_subparsers(dest="deploy_command", metavar="MODE")
    for add in (_local_parser, _certs_parser, _server_parser, _silo_parser, _shuffler_parser):
        add(sub)
    return p


def _local_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    local = sub.add_parser("local", help="one-command trial: server + M silos on 127.0.0.1")
    local.add_argument(
        "--config", type=Path, metavar="CONFIG.toml",
        help="experiment configuration (default: the embedded trial, 3 silos, LDP, T = 60, B = 20)",
    )  # fmt: skip
    local.add_argument("--silos", type=int, help="number of silos (must equal the config's agents)")
    local.add_argument("--algorithm", help="label of the fedlinucb entry to deploy (if several)")
    local.add_argument("--run", type=int, default=0, help="which run of the config (seeds), default 0")
    local.add_argument("--workdir", type=Path, help="keep certificates, logs and durable state here")
    local.add_argument(
        "--round-timeout",
        type=float,
        default=90.0,
        help="seconds a round waits for silos (default 90: a silo restarted after a crash rejoins within ~75 s)",
    )
    local.add_argument("--timeout", type=float, default=1800.0, help="seconds before the whole trial is abandoned")
    local.add_argument("--check-parity", action="store_true", help="compare with the simulator (actions, sums)")


def _certs_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    certs = sub.add_parser("certs", help="create a trial CA, server certificate and silo keys")
    certs.add_argument("--out", type=Path, required=True, help="output folder")
    certs.add_argument("--silos", type=int, required=True, help="number of silo keys")
    certs.add_argument("--host", action="append", help="server host name / IP for the certificate (repeatable)")
    certs.add_argument(
        "--shuffler-hop", action="store_true",
        help="instead: the shuffler hop's own CA, shuffler certificate and client certificates (the shuffler's "
        "operator runs this)",
    )  # fmt: skip
    certs.add_argument(
        "--shuffler-host", action="append", help="with --shuffler-hop: shuffler host name / IP (repeatable)"
    )
    certs.add_argument(
        "--signing", action="store_true",
        help="instead: the silos' signing CA and each silo's signing key (distributed-dp; the silos' "
        "consortium runs this, never the server's operator)",
    )  # fmt: skip


def _server_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    server = sub.add_parser("server", help="run the server side (multi-machine use): SuperLink, silo keys, the app")
    server.add_argument("--config", type=Path, required=True, metavar="CONFIG.toml", help="experiment configuration")
    server.add_argument(
        "--creds", type=Path, required=True, help="folder with ca.pem, server.pem, server.key and silo-<i>.pub"
    )
    server.add_argument("--workdir", type=Path, required=True, help="durable server folder (run again to resume)")
    server.add_argument("--algorithm", help="label of the fedlinucb entry to deploy (if several)")
    server.add_argument("--run", type=int, default=0, help="which run of the config (seeds), default 0")
    server.add_argument(
        "--host",
        default="127.0.0.1",
        help="address the SuperLink listens on (default 127.0.0.1; its port also carries Flower's unauthenticated "
        "Control API: expose only /v1/fleet/ and /health to the silos, see docs/deployment.md)",
    )
    server.add_argument("--port", type=int, default=9092, help="port of the SuperLink (default 9092)")
    server.add_argument(
        "--cli-host",
        help="address and certificate name by which this host reaches its SuperLink (default: --host, or "
        "127.0.0.1 when --host is a wildcard)",
    )
    server.add_argument("--shuffler", metavar="HOST:PORT", help="the shuffler party (sdp-amplification only)")
    server.add_argument(
        "--shuffler-creds", type=Path,
        help="folder with shuffler-ca.pem, server-client.pem and server-client.key (default: --creds)",
    )  # fmt: skip
    server.add_argument(
        "--round-timeout",
        type=float,
        default=90.0,
        help="seconds a round waits for silos (default 90: a silo restarted after a crash rejoins within ~75 s)",
    )
    server.add_argument("--join-timeout", type=float, default=600.0, help="seconds the server waits for the silos")
    server.add_argument("--timeout", type=float, default=86400.0, help="seconds before the run is abandoned")


def _silo_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    silo = sub.add_parser("silo", help="run one silo's SuperNode (multi-machine use)")
    silo.add_argument("--superlink", required=True, help="server address HOST:PORT")
    silo.add_argument(
        "--config", type=Path, required=True, metavar="CONFIG.toml",
        help="this silo's copy of the deployment's config: requests for any other deployment are refused",
    )  # fmt: skip
    silo.add_argument("--algorithm", help="label of the fedlinucb entry (if several)")
    silo.add_argument("--run", type=int, default=0, help="which run of the config, default 0")
    silo.add_argument("--silo-id", type=int, required=True, help="this silo's index")
    silo.add_argument("--ca", type=Path, required=True, help="CA certificate that signed the server's")
    silo.add_argument("--key", type=Path, required=True, help="this silo's private authentication key")
    silo.add_argument("--state-dir", type=Path, required=True, help="durable state folder of this silo")
    silo.add_argument(
        "--runtime-port", type=int,
        help="port of the SuperNode's runtime (ClientAppIo) API on 127.0.0.1 (flower-supernode --port); default: a "
        "free loopback port, printed at start, so several silos can share a host; a given port already in use is "
        "refused",
    )  # fmt: skip
    silo.add_argument(
        "--noise-source",
        choices=["os", "derived"],
        default="os",
        help="os: secret noise, an exact discrete Gaussian from the OS CSPRNG (default); derived: the simulator's "
        "noise, computable from the config (parity trials only)",
    )
    silo.add_argument(
        "--share-report",
        action="store_true",
        help="send the server this silo's trial report at the end (regret curve and counts from raw data, outside "
        "the privacy guarantee; off by default)",
    )
    silo.add_argument(
        "--data", type=Path, help="this silo's users (.npz or .csv; the config's environment must be data-files)"
    )
    silo.add_argument("--signing-key", type=Path, help="this silo's signing key (distributed-dp only)")
    silo.add_argument("--signing-cert", type=Path, help="its certificate (silo-<i>-signing.pem)")
    silo.add_argument("--signing-ca", type=Path, help="the silos' signing CA (signing-ca.pem)")
    silo.add_argument("--shuffler", metavar="HOST:PORT", help="the shuffler party (sdp-amplification only)")
    silo.add_argument("--shuffler-ca", type=Path, help="the shuffler hop's CA (shuffler-ca.pem)")
    silo.add_argument("--tls-cert", type=Path, help="this silo's TLS client certificate for the shuffler")
    silo.add_argument("--tls-key", type=Path, help="its private key")


def _shuffler_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    shuf = sub.add_parser(
        "shuffler", help="run the shuffler party of a shuffled protocol (sdp-amplification): mutual TLS"
    )
    source = shuf.add_mutually_exclusive_group(required=True)
    source.add_argument("--config", type=Path, metavar="CONFIG.toml", help="the deployment's config")
    source.add_argument("--spec", type=Path, help="a deployment work folder's spec.json (instead of --config)")
    shuf.add_argument("--algorithm", help="label of the fedlinucb entry (if several)")
    shuf.add_argument("--run", type=int, help="which run of the config, default 0")
    shuf.add_argument("--listen", default="127.0.0.1:9095", metavar="HOST:PORT", help="default 127.0.0.1:9095")
    shuf.add_argument(
        "--ca",
        type=Path,
        required=True,
        help="the shuffler hop's CA (shuffler-ca.pem): signed every client's certificate",
    )
    shuf.add_argument("--cert", type=Path, required=True, help="the shuffler's certificate (shuffler.pem)")
    shuf.add_argument("--key", type=Path, required=True, help="its private key (shuffler.key)")
    shuf.add_argument("--state-dir", type=Path, required=True, help="durable state folder (run again to resume)")
    shuf.add_argument(
        "--shuffle-source", choices=["os", "derived"], default="os",
        help="os: the OS's CSPRNG (default); derived: the simulator's permutations (parity trials only)",
    )  # fmt: skip


def run_deploy(args: argparse.Namespace) -> int:
    mode = getattr(args, "deploy_command", None)
    if mode == "local":
        return _local(args)
    if mode == "certs":
        from fedbandits.federation.certs import (
            create_flower_credentials,
            create_shuffler_credentials,
            create_signing_credentials,
        )

        if args.silos < 1:
            raise ValueError(f"--silos must be >= 1, got {args.silos}")
        if args.signing:
            if args.host or args.shuffler_hop or args.shuffler_host:
                raise ValueError("--signing makes the signing credentials only: drop --host and the shuffler flags")
            out = create_signing_credentials(args.out, args.silos)
            print(
                f"wrote signing-ca.pem (give it to every silo and the server), signing-ca.key (keep offline, "
                f"away from the server's operator), silo-<i>-signing.pem/.key (silo i only) to {out}"
            )
            return 0
        if args.shuffler_hop:
            if args.host:
                raise ValueError("--host is for the server's certificate; with --shuffler-hop use --shuffler-host")
            out = create_shuffler_credentials(args.out, args.silos, args.shuffler_host)
            print(
                f"wrote shuffler-ca.pem, shuffler-ca.key (keep offline), shuffler.pem/.key (the shuffler's host), "
                f"server-client.pem/.key (the server), silo-<i>-client.pem/.key (silo i only) to {out}"
            )
            return 0
        if args.shuffler_host:
            raise ValueError("--shuffler-host goes with --shuffler-hop (the shuffler's credentials)")
        out = create_flower_credentials(args.out, args.silos, args.host)
        print(f"wrote ca.pem, ca.key (keep offline), server.pem, server.key, silo-<i>[.pub] to {out}")
        return 0
    if mode == "server":
        return _server(args)
    if mode == "silo":
        return _silo(args)
    if mode == "shuffler":
        return _shuffler(args)
    raise ValueError("choose a deploy mode: local, certs, server, silo or shuffler (see `fedbandits deploy --help`)")


@contextmanager
def _terminate_cleanly() -> Iterator[None]:
    """Turn SIGTERM / SIGINT into KeyboardInterrupt while the block runs, so that the processes a
    deployment started are stopped (context managers run) when the command itself is stopped; later
    signals are ignored until the block has exited, so they cannot cut the clean-up short."""

    def handler(signum: int, frame: Any) -> None:
        # a second signal must not interrupt the clean-up the first one starts
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        raise KeyboardInterrupt(f"signal {signum}")

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def _check_common(args: argparse.Namespace) -> None:
    for name in ("round_timeout", "timeout", "join_timeout"):
        value = getattr(args, name, None)
        if value is not None and not value > 0:
            raise ValueError(f"--{name.replace('_', '-')} must be positive, got {value}")
    if isinstance(getattr(args, "run", None), int) and args.run < 0:
        raise ValueError(f"--run must be >= 0, got {args.run}")


def _print_summary(spec: DeploySpec, seconds: float, summary: dict[str, Any]) -> None:
    """The simulator's summary table of a finished deployment, with what was measured on the wire."""
    exp = spec.config.experiment
    shuffler = " + shuffler (mutual TLS)" if spec.shuffled else ""
    print(
        f"{exp.name} (deployed on Flower, {spec.silos} silos, TLS + SuperNode auth{shuffler}): "
        f"{spec.config.environment.name}, M={spec.silos}, T={exp.horizon}, run {spec.run}, {seconds:.1f} s"
    )
    print(summary["table"])
    for line in summary.get("clipping_warnings", []):  # a state folder from before the field: none
        print(f"fedbandits: warning: {line}", file=sys.stderr)
    via = f"; shuffler -> server batches {summary.get('shuffler_bytes', 0)} bytes" if spec.shuffled else ""
    print(
        f"on the wire: {summary['uplink_messages']} uplink / {summary['downlink_messages']} downlink "
        f"messages, {summary['uplink_bytes']} / {summary['downlink_bytes']} bytes{via}; "
        f"rejected {summary['rejections']}"
    )
    missing = summary.get("missing") or {}
    if missing:
        rounds = sorted(missing.items(), key=lambda kv: int(kv[0]))
        print("silos missing (round: silos): " + ", ".join(f"{k}: {v}" for k, v in rounds))


def _local(args: argparse.Namespace) -> int:
    from fedbandits.federation.deployment import LocalDeployment

    _check_common(args)
    config = load_config(args.config if args.config is not None else TRIAL_CONFIG)
    if args.silos is not None and args.silos != config.environment.params.agents:
        raise ValueError(f"--silos {args.silos} differs from the config's agents = {config.environment.params.agents}")
    spec = make_spec(config, args.algorithm, args.run)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="fedbandits-deploy-"))
    keep = args.workdir is not None
    started = time.time()
    try:
        with _terminate_cleanly(), LocalDeployment(workdir, spec, round_timeout=args.round_timeout) as dep:
            dep.start()
            summary = dep.wait_done(args.timeout)
            _print_summary(spec, time.time() - started, summary)
            if spec.private:
                shuffles = " and the shuffler's permutations" if spec.shuffled else ""
                print(
                    f"(a trial: the silos' noise{shuffles} are derived from the config's seeds, for parity with "
                    "the simulator -- no privacy against anybody who has the config; deploy silo/shuffler default "
                    "to secret randomness)"
                )
            if args.check_parity:
                from fedbandits.federation.parity import compare, reference_run
                from fedbandits.federation.server import Coordinator

                coord = Coordinator(spec, dep.state / "server")
                problems = compare(
                    spec, reference_run(spec), coord.synced_prefixes(),
                    {i: dep.state / f"silo-{i}" for i in range(spec.silos)},
                )  # fmt: skip
                print("parity with the simulator: " + ("OK (actions and synced sums)" if not problems else "FAILED"))
                for line in problems:
                    print(f"  {line}")
                if problems:
                    return 1
            if keep:
                print(f"state, logs, certificates: {workdir}")
    finally:
        if not keep:
            shutil.rmtree(workdir, ignore_errors=True)
    return 0


def _server(args: argparse.Namespace) -> int:
    from fedbandits.federation.deployment import ServerDeployment

    _check_common(args)
    if not 1 <= args.port <= 65535:
        raise ValueError(f"--port must be in [1, 65535], got {args.port}")
    config = load_config(args.config)
    spec = make_spec(config, args.algorithm, args.run)
    cli_host = args.cli_host or ("127.0.0.1" if args.host in ("0.0.0.0", "::", "") else args.host)
    _check_shuffler_flag(spec, args.shuffler)
    if args.shuffler_creds is not None and not spec.shuffled:
        raise ValueError(f"--shuffler-creds is only for a shuffled protocol, not {spec.params.protocol!r}")
    dep = ServerDeployment(
        args.workdir, spec, certs=args.creds, host=args.host, port=args.port, cli_host=cli_host,
        round_timeout=args.round_timeout, join_timeout=args.join_timeout, shuffler=args.shuffler,
        shuffler_creds=args.shuffler_creds,
    )  # fmt: skip
    missing = dep.missing_credentials()
    if missing:  # before anything starts
        raise ValueError("--creds lacks " + ", ".join(p.name for p in missing) + f" (in {dep.creds})")
    started = time.time()
    with _terminate_cleanly(), dep:
        dep.start()
        print(
            f"server up on {args.host}:{dep.port} (TLS, SuperNode auth); waiting for {spec.silos} silos; "
            f"state in {dep.workdir}",
            flush=True,
        )
        summary = dep.wait_done(args.timeout)
        _print_summary(spec, time.time() - started, summary)
    return 0


def _silo(args: argparse.Namespace) -> int:
    from fedbandits.federation.flower_setup import check_quotable, supernode_command
    from fedbandits.federation.processes import DeployError, flower_env, hold_lock, kill_processes_under
    from fedbandits.federation.shuffler_client import split_address

    split_address(args.superlink, "--superlink")
    if args.silo_id < 0:
        raise ValueError(f"--silo-id must be >= 0, got {args.silo_id}")
    if args.runtime_port is not None and not 1 <= args.runtime_port <= 65535:
        raise ValueError(f"--runtime-port must be in [1, 65535], got {args.runtime_port}")
    for name in ("ca", "key", "data", "config"):
        path = getattr(args, name)
        if path is not None and not path.is_file():
            raise ValueError(f"--{name}: no such file {path}")
    # the silo decides what it runs: the spec's hash from its own copy of the config is pinned
    spec = make_spec(load_config(args.config), args.algorithm, args.run)
    if args.silo_id >= spec.silos:
        raise ValueError(f"--silo-id must be < the config's {spec.silos} silos, got {args.silo_id}")
    state_dir = args.state_dir.resolve()
    _check_shuffler_flag(spec, args.shuffler)
    protocol = spec.params.protocol
    _check_files(args, ("shuffler_ca", "tls_cert", "tls_key"), spec.shuffled, protocol, "TLS to the shuffler")
    if spec.shuffled:
        _check_client_certificate(args.tls_cert, f"silo-{args.silo_id}")
    _check_files(
        args, ("signing_key", "signing_cert", "signing_ca"), spec.masked, protocol, "signed secure aggregation"
    )
    if spec.masked:
        _check_signing(args.silo_id, args.signing_key, args.signing_cert, args.signing_ca)
    extra = f'noise-source="{args.noise_source}" spec-digest="{spec.digest}"'
    if args.share_report:
        extra += ' share-report="true"'
    try:
        if args.data is not None:
            extra += f' data-file="{check_quotable("--data", args.data.resolve())}"'
        if spec.masked:
            for name in ("signing_key", "signing_cert", "signing_ca"):
                flag = "--" + name.replace("_", "-")
                extra += f' {flag[2:]}="{check_quotable(flag, getattr(args, name).resolve())}"'
        if spec.shuffled:
            extra += f' shuffler="{check_quotable("--shuffler", args.shuffler)}"'
            extra += f' shuffler-ca="{check_quotable("--shuffler-ca", args.shuffler_ca.resolve())}"'
            extra += f' shuffler-cert="{check_quotable("--tls-cert", args.tls_cert.resolve())}"'
            extra += f' shuffler-key="{check_quotable("--tls-key", args.tls_key.resolve())}"'
        check_quotable("--state-dir", state_dir)
    except DeployError as exc:
        raise ValueError(str(exc)) from None
    home = state_dir / "flwr-home"
    with hold_lock(state_dir, "silo"):
        # a SuperNode left by a SIGKILLed earlier `deploy silo` on this state folder (no other live
        # instance can use it: we hold its lock) would hold the key and the port
        killed = kill_processes_under(home)
        if killed:
            print(f"stopped {len(killed)} process(es) left by an earlier instance of this silo", flush=True)
        port, how = _runtime_port(args.runtime_port)
        cmd = supernode_command(
            args.superlink, args.ca.resolve(), args.key.resolve(), args.silo_id, state_dir, port, extra
        )
        print(f"SuperNode runtime API on 127.0.0.1:{port} ({how})", flush=True)
        print("starting: " + " ".join(cmd), flush=True)
        # a silo restarted soon after a crash is refused until the server sees its old instance time
        # out (<= 60 s): keep trying for a bounded time (see fedbandits.federation.supervisor)
        return supervise(cmd, env=flower_env(home))


def _runtime_port(requested: int | None) -> tuple[int, str]:
    """The port of the SuperNode's runtime API on 127.0.0.1, and how it was chosen: ``requested``,
    refused in one line if a listener could not bind it now (Flower would die on it with a traceback),
    else a free loopback port."""
    from fedbandits.federation.processes import free_port, loopback_port_problem

    if requested is None:
        return free_port(), "a free loopback port; --runtime-port to choose one"
    problem = loopback_port_problem(requested)
    if problem is not None:
        raise ValueError(
            f"--runtime-port {requested}: cannot listen on 127.0.0.1:{requested} ({problem}; another silo's "
            "SuperNode?): give a free port, or leave --runtime-port out to have one picked"
        )
    return requested, "--runtime-port"


def _check_files(args: argparse.Namespace, names: tuple[str, ...], needed: bool, protocol: str, why: str) -> None:
    """The file flags ``names`` are given, and exist, exactly when the protocol ``needed`` them (for ``why``)."""
    for name in names:
        path = getattr(args, name)
        flag = "--" + name.replace("_", "-")
        if needed and path is None:
            raise ValueError(f"{flag} is required with protocol {protocol!r} ({why})")
        if not needed and path is not None:
            raise ValueError(f"{flag} is only for a protocol with {why}, not {protocol!r}")
        if path is not None and not path.is_file():
            raise ValueError(f"{flag}: no such file {path}")


def _check_signing(silo: int, key: Path, cert: Path, ca: Path) -> None:
    """The signing files load, the certificate certifies the key, and the CA issued it to ``silo-<i>``."""
    from fedbandits.crypto.signing import load_signing

    try:
        load_signing(silo, key, cert, ca)
    except ValueError as exc:
        raise ValueError(f"--signing-key/--signing-cert/--signing-ca: {exc}") from None


def _check_client_certificate(path: Path, name: str) -> None:
    """``--tls-cert`` must be a PEM certificate whose common name is this party's identity."""
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    try:
        cert = x509.load_pem_x509_certificate(path.read_bytes())
    except (OSError, ValueError) as exc:
        raise ValueError(f"--tls-cert {path} is not a PEM certificate: {exc}") from None
    names = [str(a.value) for a in cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)]
    if names != [name]:
        raise ValueError(f"--tls-cert {path} is issued to {names}, not to {name!r} (this --silo-id)")


def _check_shuffler_flag(spec: DeploySpec, address: str | None) -> None:
    """``--shuffler`` is required exactly for the shuffled protocols, and must be HOST:PORT."""
    from fedbandits.federation.shuffler_client import split_address

    if spec.shuffled and not address:
        raise ValueError(f"--shuffler HOST:PORT is required with protocol {spec.params.protocol!r}")
    if not spec.shuffled and address:
        raise ValueError(f"--shuffler is only for a shuffled protocol, not {spec.params.protocol!r}")
    if address:
        split_address(address, "--shuffler")


def _shuffler(args: argparse.Namespace) -> int:
    import logging

    from fedbandits.federation.processes import hold_lock
    from fedbandits.federation.shuffler import serve
    from fedbandits.federation.shuffler_client import ShufflerError, split_address

    _check_common(args)
    host, port = split_address(args.listen, "--listen")
    for name in ("ca", "cert", "key", "config", "spec"):
        path = getattr(args, name, None)
        if path is not None and not path.is_file():
            raise ValueError(f"--{name}: no such file {path}")
    if args.spec is not None:
        if args.algorithm is not None or args.run is not None:
            raise ValueError("--algorithm and --run go with --config; a --spec file names its entry and run")
        try:
            spec = spec_from_json(args.spec.read_text())
        except ValueError as exc:  # JSON errors, ConfigError
            raise ConfigError(f"--spec {args.spec}: {exc}") from None
    else:
        spec = make_spec(load_config(args.config), args.algorithm, args.run or 0)
    if not spec.shuffled:
        raise ValueError(f"protocol {spec.params.protocol!r} has no shuffler (only sdp-amplification)")
    state_dir = args.state_dir.resolve()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    with hold_lock(state_dir, "shuffler"), _terminate_cleanly():
        where = f"{host}:{port} (mutual TLS), state in {state_dir}"
        print(f"shuffler for deployment {spec.digest[:12]} on {where}", flush=True)
        try:  # a derived shuffle source is warned about in the log, once
            serve(spec, state_dir, host, port, args.ca, args.cert, args.key, args.shuffle_source)
        except ShufflerError as exc:
            raise ValueError(str(exc)) from None
        except KeyboardInterrupt:
            print("shuffler stopped", flush=True)
    return 0
