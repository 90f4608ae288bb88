"""`fedbandits deploy silo`'s SuperNode runtime port: several silos on one host each get a free
loopback port unless told one; a port that is told and taken is refused in one line before Flower
starts (Flower itself dies on it with a long traceback).

No Flower process is started: the SuperNode's supervisor is replaced by a stand-in that listens on
the port the command line gives it, as the SuperNode's runtime API would.
"""

from __future__ import annotations

import re
import socket
from pathlib import Path

import pytest

from fedbandits.cli import main
from fedbandits.federation import processes
from fedbandits.federation.certs import create_trial_credentials

CONFIG = """
[experiment]
seed = 7
horizon = 30
[environment]
name = "gaussian-sphere"
agents = 3
arms = 5
dim = 4
[[algorithms]]
name = "fedlinucb"
batch = 10
protocol = "ldp"
epsilon = 5.0
delta = 0.01
"""


@pytest.fixture
def silo_command(tmp_path: Path):  # type: ignore[no-untyped-def]
    config = tmp_path / "c.toml"
    config.write_text(CONFIG)
    creds = create_trial_credentials(tmp_path / "creds", 3)

    def command(i: int, *extra: str) -> list[str]:
        return [
            "deploy", "silo", "--superlink", "127.0.0.1:9092", "--silo-id", str(i), "--config", str(config),
            "--ca", str(creds / "ca.pem"), "--key", str(creds / f"silo-{i}"), "--state-dir", str(tmp_path / f"s{i}"),
            *extra,
        ]  # fmt: skip

    return command


@pytest.fixture
def supernodes(monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """The stand-in SuperNodes started: (command line, the socket listening on its --port)."""
    started: list[tuple[list[str], socket.socket]] = []

    def supervise(cmd: list[str], **kw: object) -> int:
        port = int(cmd[cmd.index("--port") + 1])
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.bind(("127.0.0.1", port))  # OSError (a failed test) if the chosen port was taken
        listener.listen()
        started.append((cmd, listener))
        return 0

    monkeypatch.setattr("fedbandits.cli.deploy.supervise", supervise)
    monkeypatch.setattr("fedbandits.federation.flower_setup.flower_bin", lambda name: name)  # no Flower needed
    yield started
    for _, listener in started:
        listener.close()


def test_silos_on_one_host_each_get_a_free_runtime_port_and_say_which(silo_command, supernodes, capsys, monkeypatch):
    for i in range(3):
        monkeypatch.setattr(processes, "_HANDED_OUT", set())  # each `deploy silo` is a process of its own
        assert main(silo_command(i)) == 0
    out = capsys.readouterr().out
    ports = [int(cmd[cmd.index("--port") + 1]) for cmd, _ in supernodes]
    assert len(set(ports)) == 3  # each listening while the next one chose
    said = [int(p) for p in re.findall(r"SuperNode runtime API on 127\.0\.0\.1:(\d+) \(a free loopback port", out)]
    assert said == ports


def test_a_runtime_port_in_use_is_refused_in_one_line_before_flower_starts(silo_command, supernodes, capsys):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert main(silo_command(0, "--runtime-port", str(port))) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"fedbandits: error: --runtime-port {port}: cannot listen on 127.0.0.1:{port}"), err
    assert "\n" not in err
    assert supernodes == []  # nothing started
    # the same port, free again, is used as given
    assert main(silo_command(0, "--runtime-port", str(port))) == 0
    assert f"SuperNode runtime API on 127.0.0.1:{port} (--runtime-port)" in capsys.readouterr().out
    assert [cmd[cmd.index("--port") + 1] for cmd, _ in supernodes] == [str(port)]


def test_two_silos_told_the_same_runtime_port_the_second_is_refused(silo_command, supernodes, capsys):
    port = processes.free_port()
    assert main(silo_command(0, "--runtime-port", str(port))) == 0  # its stand-in SuperNode listens on it
    assert main(silo_command(1, "--runtime-port", str(port))) == 2
    err = capsys.readouterr().err.strip()
    assert f"--runtime-port {port}: cannot listen" in err and "leave --runtime-port out" in err and "\n" not in err
    assert len(supernodes) == 1
