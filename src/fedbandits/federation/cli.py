"""``fedbandits deploy``: run Private-FedLinUCB as a real federation on Flower.

    fedbandits deploy local --config CONFIG.toml [--silos M] [--workdir DIR] [--algorithm LABEL] [--check-parity]
    fedbandits deploy certs --out DIR --silos M [--host HOST ...]
    fedbandits deploy silo --superlink HOST:PORT --silo-id I --ca CA.pem --key silo-I --state-dir DIR

``local`` starts a SuperLink, one SuperNode per silo and the app on 127.0.0.1 (TLS, SuperNode
authentication), prints the simulator's summary table and stops every process it started.
``certs`` creates a trial CA, the server certificate and the silo keys; ``silo`` runs one silo's
SuperNode on its own machine (see docs/deployment.md for the server side).
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path


def add_deploy_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:  # type: ignore[type-arg]
    p = subparsers.add_parser(
        "deploy",
        help="run the federation for real on Flower (server and silos as processes, TLS, authentication)",
        description="Cross-silo deployment on Flower (needs `pip install 'fedbandits[deploy]'`).",
    )
    sub = p.add_subparsers(dest="deploy_command", metavar="MODE")
    local = sub.add_parser("local", help="one-command trial: server + M silos on 127.0.0.1")
    local.add_argument("--config", type=Path, required=True, metavar="CONFIG.toml", help="experiment configuration")
    local.add_argument("--silos", type=int, help="number of silos (must equal the config's agents)")
    local.add_argument("--algorithm", help="label of the fedlinucb entry to deploy (if several)")
    local.add_argument("--run", type=int, default=0, help="which run of the config (seeds), default 0")
    local.add_argument("--workdir", type=Path, help="keep certificates, logs and durable state here")
    local.add_argument("--round-timeout", type=float, default=60.0, help="seconds a round waits for silos")
    local.add_argument("--timeout", type=float, default=1800.0, help="seconds before the whole trial is abandoned")
    local.add_argument("--check-parity", action="store_true", help="compare with the simulator (actions, sums)")

    certs = sub.add_parser("certs", help="create a trial CA, server certificate and silo keys")
    certs.add_argument("--out", type=Path, required=True, help="output folder")
    certs.add_argument("--silos", type=int, required=True, help="number of silo keys")
    certs.add_argument("--host", action="append", help="server host name / IP for the certificate (repeatable)")

    silo = sub.add_parser("silo", help="run one silo's SuperNode (multi-machine use)")
    silo.add_argument("--superlink", required=True, help="server address HOST:PORT")
    silo.add_argument("--silo-id", type=int, required=True, help="this silo's index")
    silo.add_argument("--ca", type=Path, required=True, help="CA certificate that signed the server's")
    silo.add_argument("--key", type=Path, required=True, help="this silo's private authentication key")
    silo.add_argument("--state-dir", type=Path, required=True, help="durable state folder of this silo")
    silo.add_argument("--runtime-port", type=int, default=9094, help="local port of the SuperNode runtime API")
    silo.add_argument("--noise-source", choices=["os", "derived"], default="os", help="os: secret noise (default)")
    return p


def run_deploy(args: argparse.Namespace) -> int:
    mode = getattr(args, "deploy_command", None)
    if mode == "local":
        return _local(args)
    if mode == "certs":
        from fedbandits.federation.certs import create_trial_credentials

        if args.silos < 1:
            raise ValueError(f"--silos must be >= 1, got {args.silos}")
        out = create_trial_credentials(args.out, args.silos, args.host)
        print(f"wrote ca.pem, ca.key (keep offline), server.pem, server.key, silo-<i>[.pub] to {out}")
        return 0
    if mode == "silo":
        return _silo(args)
    raise ValueError("choose a deploy mode: local, certs or silo (see `fedbandits deploy --help`)")


def _local(args: argparse.Namespace) -> int:
    from fedbandits.config import load_config
    from fedbandits.federation.launcher import LocalDeployment
    from fedbandits.federation.spec import make_spec

    config = load_config(args.config)
    if args.silos is not None and args.silos != config.environment.params.agents:
        raise ValueError(f"--silos {args.silos} differs from the config's agents = {config.environment.params.agents}")
    if args.round_timeout <= 0 or args.timeout <= 0:
        raise ValueError("timeouts must be positive")
    spec = make_spec(config, args.algorithm, args.run)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="fedbandits-deploy-"))
    keep = args.workdir is not None
    started = time.time()
    try:
        with LocalDeployment(workdir, spec, round_timeout=args.round_timeout) as dep:
            dep.start()
            summary = dep.wait_done(args.timeout)
            exp = config.experiment
            print(
                f"{exp.name} (deployed on Flower, {spec.silos} silos, TLS + SuperNode auth): "
                f"{config.environment.name}, M={spec.silos}, T={exp.horizon}, run {spec.run}, "
                f"{time.time() - started:.1f} s"
            )
            print(summary["table"])
            print(
                f"on the wire: {summary['uplink_messages']} uplink / {summary['downlink_messages']} downlink "
                f"messages, {summary['uplink_bytes']} / {summary['downlink_bytes']} bytes; "
                f"rejected {summary['rejections']}"
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


def _silo(args: argparse.Namespace) -> int:
    from fedbandits.federation.launcher import flower_env, supernode_command
    from fedbandits.federation.supervisor import supervise

    cmd = supernode_command(
        args.superlink, args.ca.resolve(), args.key.resolve(), args.silo_id, args.state_dir.resolve(),
        args.runtime_port, f'noise-source="{args.noise_source}"',
    )  # fmt: skip
    print("starting: " + " ".join(cmd), flush=True)
    # a silo restarted soon after a crash is refused until the server sees its old instance time
    # out (<= 60 s): keep trying for a bounded time (see fedbandits.federation.supervisor)
    return supervise(cmd, env=flower_env(args.state_dir.resolve() / "flwr-home"))
