"""The ``fedbandits`` command line's parser: the program and its command groups, each of which
declares its own commands (:mod:`~fedbandits.cli.simulate`, :mod:`~fedbandits.cli.experiments`,
:mod:`~fedbandits.cli.audit`, :mod:`~fedbandits.cli.evaluate`, :mod:`~fedbandits.cli.deploy`,
:mod:`~fedbandits.cli.serve`)."""

from __future__ import annotations

import argparse

from fedbandits import __version__
from fedbandits.cli import audit, evaluate, experiments, simulate
from fedbandits.cli.deploy import add_deploy_parser
from fedbandits.cli.options import Parser
from fedbandits.cli.serve import add_serve_parser


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="fedbandits",
        description="Differentially private federated linear contextual bandits: simulate, compare, plot.",
        epilog="Start with `fedbandits quickstart`; then copy src/fedbandits/quickstart.toml or an example "
        "from examples/ and edit it (`fedbandits list` shows every name and parameter).",
    )
    parser.add_argument("--version", action="version", version=f"fedbandits {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    simulate.add_parsers(sub)
    experiments.add_parsers(sub)
    audit.add_parser(sub)
    evaluate.add_parser(sub)
    add_deploy_parser(sub)
    add_serve_parser(sub)
    return parser
