"""A cheating server over real Flower processes (issue #32): the deployment's silos refuse it.

The ServerApp here is the honest one with a cheat added: in round 2 it hides silo 1's masked
message and declares silo 1 dropped, takes the survivors' round seeds with silo 1 (the honest
protocol hands those over for a dropped silo), then tries to obtain silo 1's self-mask as well: it
asks every silo to sign a second survivor list that includes silo 1, then asks every silo for its
self-mask shares as if nobody had dropped (which needs no signature).  Against the previous protocol the same false
drop opened silo 1's message exactly (commit 6f0bbc0, tests/test_secagg_attacks.py).  One dropout is
provisioned, so the honest silos do sign a list without silo 1 (with ``dropouts = 0`` they would
refuse any list shorter than 3: tests/test_deploy_distributed.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from fedbandits.config import loads_config
from fedbandits.federation.spec import make_spec

pytest.importorskip("flwr")
from deployhelp import wait_for
from fedbandits.federation.deployment import LocalDeployment
from fedbandits.federation.silo import load_silo_results

slow = pytest.mark.slow
CONFIG = """
[experiment]
seed = 3
horizon = 20
[environment]
name = "gaussian-sphere"
agents = 3
arms = 10
dim = 4
[[algorithms]]
name = "fedlinucb"
batch = 10
protocol = "distributed-dp"
epsilon = 5.0
delta = 0.01
dropouts = 1
"""

CHEAT = '''
"""A ServerApp that cheats in round 2 (tests/test_deploy_cheating.py); the ClientApp is the honest one."""
import json
from pathlib import Path

import numpy as np
from flwr.serverapp import ServerApp

from fedbandits.federation import server_app as honest
from fedbandits.crypto.double_masking import MaskingServer
from fedbandits.crypto.secure_aggregation import prg, shamir_join
from fedbandits.federation.server import Coordinator

server_app = ServerApp()
ROUND, VICTIM = 2, 1


@server_app.main()
def main(grid, context):
    cfg = context.run_config
    state_dir = Path(str(cfg["state-dir"]))
    registry = {int(n): int(s) for n, s in json.loads(Path(str(cfg["registry-file"])).read_text()).items()}
    node_of = {s: n for n, s in registry.items()}
    held = {}
    close_messages, close_round = MaskingServer.close_messages, Coordinator.close_masked_round

    def hide_victim(self):  # the secure round's server side, as the round ends taking messages
        if self.round_ == ROUND and VICTIM in self.received:
            held["m"] = self.received.pop(VICTIM)
        return close_messages(self)

    def attack(self, k, reveals, rejected):
        if k != ROUND or "m" not in held:
            return close_round(self, k, reveals, rejected)
        secagg = self.state.secagg
        base = {"round": k, "digest": self.spec.digest, "prefix_round": k - 1, "spec": self.spec.to_json(),
                "epoch": secagg.epoch}
        everybody = secagg.roster.members
        errors = []

        def ask(meta, nodes, per_node=None):
            replies = honest._exchange(grid, self, registry, "query", {**base, **meta}, k, 20.0, 0.2, per_node,
                                       only=nodes)
            errors.extend(str(r.error) for r in replies if r.error is not None)
            return {registry[r.node_id]: dict(r.meta) for r in replies if r.error is None and r.meta}

        # a second survivor list, with the victim: the others signed one list this round already
        signed = ask({"phase": "survivors", "survivors": everybody}, [node_of[i] for i in everybody])
        # then "nobody dropped", which needs no signature: each silo is asked for its self-mask shares
        messages = {**{i: secagg.received[i] for i in secagg.received}, VICTIM: held["m"]}
        per_node = {}
        for j in everybody:
            others = [i for i in everybody if i != j]
            per_node[node_of[j]] = {"held_from": others, "held": [messages[i].blobs[j] for i in others]}
        answers = ask({"phase": "unmask", "survivors": everybody, "dropped": [], "signers": [], "signatures": []},
                      [node_of[i] for i in everybody], per_node)
        shares = {j: dict(zip(m["b_owners"], m["b_shares"])) for j, m in answers.items()}
        victim_shares = {j: s[VICTIM] for j, s in shares.items() if VICTIM in s}
        try:
            shamir_join(victim_shares, secagg.roster.threshold)
            join_error = ""
        except ValueError as exc:
            join_error = str(exc)
        # what the server can make of the victim's message: every round seed it obtained removed
        y = held["m"].masked.copy()
        for j, reveal in reveals.items():
            m = prg(reveal.seeds[VICTIM], 0, secagg.width, secagg.bits)
            y = y + m if j < VICTIM else y - m
        guess = y & np.uint64((1 << secagg.bits) - 1)
        (state_dir / "cheat.json").write_text(json.dumps({
            "guess": [int(v) for v in guess], "errors": errors, "signed_by": sorted(signed),
            "victim_shares": sorted(victim_shares), "join_error": join_error,
        }))
        return close_round(self, k, reveals, rejected)

    MaskingServer.close_messages, Coordinator.close_masked_round = hide_victim, attack
    honest.server_main(grid, context)
'''


@dataclass
class CheatingDeployment(LocalDeployment):
    """A local deployment whose Flower app runs ``server_code`` (:data:`CHEAT` by default) as its ServerApp."""

    server_module = "fedbandits_flower.cheat"
    server_code: str = CHEAT

    def prepare(self) -> None:
        super().prepare()
        (self.workdir / "app" / "fedbandits_flower" / "cheat.py").write_text(self.server_code)


@slow
def test_a_false_drop_and_a_second_survivor_list_are_refused_over_flower(tmp_path: Path) -> None:
    spec = make_spec(loads_config(CONFIG))
    with CheatingDeployment(tmp_path, spec, round_timeout=20, join_timeout=60) as dep:
        dep.start()
        wait_for(lambda: (dep.state / "server" / "cheat.json").exists(), 240, "the cheating round")
        summary = dep.wait_done(300)
    assert dep.leftovers() == []
    assert summary["completed"] == 2 and summary["missing"] == {"2": [1]}  # the victim's round-2 data is lost
    cheat = json.loads((dep.state / "server" / "cheat.json").read_text())
    # the honest survivors refused a second list, signed or as "nobody dropped"; only the victim
    # signed it and gave its own self-mask share: one of the t = 2 needed
    assert cheat["signed_by"] == [1]
    errors = "\n".join(cheat["errors"])
    assert errors.count("a second, different survivor list") == 4
    logs = {i: (dep.state / f"silo-{i}" / "silo.log").read_text() for i in range(3)}
    assert all(logs[i].count("a second, different survivor list") == 2 for i in (0, 2))
    assert cheat["victim_shares"] == [1] and "1 share(s) cannot rebuild a key that needs 2" in cheat["join_error"]
    # what the server holds of silo 1's round-2 message is its residues under the self-mask: every
    # entry differs from the residues (a chance match has probability 2^-bits per entry, < 1e-9 here)
    residues = load_silo_results(dep.state / "silo-1", 1).messages[2]
    guess = np.array(cheat["guess"], dtype=np.uint64)
    assert guess.shape == residues.shape and not np.any(guess == residues)


CROSS_EPOCH = '''
"""A ServerApp that asks for round 1 again in a new epoch (tests/test_deploy_cheating.py).

The ClientApp is the honest one."""
import json
from pathlib import Path

from flwr.serverapp import ServerApp

from fedbandits.federation import server_app as honest
from fedbandits.crypto.double_masking import MaskingServer
from fedbandits.federation.server import Coordinator

server_app = ServerApp()
VICTIM = 1
honest_round = honest._masked_round


@server_app.main()
def main(grid, context):
    state_dir = Path(str(context.run_config["state-dir"]))
    seen = {"phase": "A", "errors": []}
    close_messages, close_round, close_empty = (
        MaskingServer.close_messages, Coordinator.close_masked_round, Coordinator.close_without_data
    )

    def hide_victim(self):  # epoch A, round 1: the victim "dropped", its message kept aside
        if seen["phase"] == "A" and self.round_ == 1:
            self.received.pop(VICTIM, None)
        return close_messages(self)

    def keep_sum(self, k, reveals, rejected):
        secagg = self.state.secagg
        if k == 1:
            seen[seen["phase"]] = [int(v) for v in secagg.total(reveals)]  # the raw modular sum
            secagg.round_ = k
        if seen["phase"] == "B":  # the replay closes nothing
            secagg.round_ = None
            return None
        return close_round(self, k, reveals, rejected)

    def no_data(self, k, rejected):
        if seen["phase"] != "B":
            return close_empty(self, k, rejected)
        seen["errors"].extend(reason for _, reason in rejected)
        self.state.secagg.round_, self.state.secagg.survivors = None, None
        return None

    def cheating_round(grid, coord, registry, spec_json, k, timeout, poll):
        if k == 2 and "A" in seen:
            seen["phase"] = "B"
            coord.state.secagg.roster = None  # a new epoch, every silo in it, and round 1 asked again
            honest_round(grid, coord, registry, spec_json, 1, timeout, poll)
            seen["phase"] = "after"
            (state_dir / "cheat.json").write_text(json.dumps(seen))
        return honest_round(grid, coord, registry, spec_json, k, timeout, poll)

    MaskingServer.close_messages, Coordinator.close_masked_round = hide_victim, keep_sum
    Coordinator.close_without_data = no_data
    honest._masked_round = cheating_round
    honest.server_main(grid, context)
'''


@slow
def test_a_release_asked_for_again_in_a_new_epoch_is_refused_over_flower(tmp_path: Path) -> None:
    """Issue #44 over real Flower processes: round 1 summed without silo 1 (a false drop) in epoch
    A, then a new epoch and round 1 asked again.  On the code before the fix every silo masked its
    stored release afresh, and the sum of epoch B minus that of epoch A was silo 1's residues
    exactly; now every silo refuses, the replay sums nothing, and the run goes on in epoch B."""
    spec = make_spec(loads_config(CONFIG))
    with CheatingDeployment(tmp_path, spec, round_timeout=20, join_timeout=60, server_code=CROSS_EPOCH) as dep:
        dep.start()
        wait_for(lambda: (dep.state / "server" / "cheat.json").exists(), 240, "the replayed round")
        summary = dep.wait_done(300)
    assert dep.leftovers() == []
    assert summary["completed"] == 2 and summary["missing"] == {"1": [1]}  # round 2: all three, in epoch B
    cheat = json.loads((dep.state / "server" / "cheat.json").read_text())
    assert "A" in cheat and "B" not in cheat  # epoch A's sum of silos 0 and 2; no second sum of release 1
    assert len(cheat["errors"]) == 3 and all(e.startswith("error reply from node") for e in cheat["errors"])
    logs = {i: (dep.state / f"silo-{i}" / "silo.log").read_text() for i in range(3)}  # each silo's refusal
    refusal = "round 1 was masked in epoch 1 already: a release enters one masked sum, ever"
    assert all(logs[i].count(refusal) == 1 for i in range(3))
