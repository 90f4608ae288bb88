"""FedLinUCB with a fixed batch schedule: Algorithm 1 of Zhou & Chowdhury (2023)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from fedbandits.algorithms.base import LinUCBParams
from fedbandits.algorithms.linucb import IndependentLinUCB
from fedbandits.core.validation import check_int
from fedbandits.protocols.base import Protocol


@dataclass(frozen=True)
class FedLinUCBParams(LinUCBParams):
    batch: int = field(default=25, metadata={"help": "rounds between synchronisations B >= 1"})
    protocol: str = field(default="none", metadata={"help": "synchronisation protocol (see the protocol list)"})

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int("batch", self.batch, low=1)
        from fedbandits.registry import PROTOCOLS  # late import: the registry imports this module

        if self.protocol not in PROTOCOLS:
            raise ValueError(f"protocol must be one of {', '.join(map(repr, PROTOCOLS))}, got {self.protocol!r}")


class FedLinUCB(IndependentLinUCB):
    """Private-FedLinUCB (Algorithm 1) with a pluggable protocol P = (R, S, A).

    Agent i acts with V_{t,i} = lambda I + W_syn + W_i and theta = V^{-1}(U_syn + U_i) (line 5),
    accumulates its batch statistics W_i, U_i (line 7), and every B rounds (a fixed,
    data-independent schedule, line 9) hands them to the protocol, receives the synchronised
    (W_syn, U_syn) and resets W_i, U_i (lines 10-17).  With the ``none`` protocol this is the
    non-private FedLinUCB baseline.  The radius uses n = M t samples (Lemma C.4).
    """

    name = "fedlinucb"
    description = "federated LinUCB, sync every `batch` rounds through a protocol (Zhou & Chowdhury Alg. 1)"

    def __init__(
        self,
        n_runs: int,
        n_agents: int,
        n_arms: int,
        dim: int,
        horizon: int,
        params: LinUCBParams,
        batch: int,
        protocol: Protocol,
    ) -> None:
        super().__init__(n_runs, n_agents, n_arms, dim, horizon, params)
        self.batch = check_int("batch", batch, low=1)
        self.protocol = protocol
        self.local_cov = np.zeros((n_runs, n_agents, dim, dim))  # W_i  (R, M, d, d)
        self.local_bias = np.zeros((n_runs, n_agents, dim))  # U_i  (R, M, d)
        self.synced_cov = np.zeros((n_runs, dim, dim))  # W_syn (R, d, d)
        self.synced_bias = np.zeros((n_runs, dim))  # U_syn (R, d)

    def radius_samples(self) -> int:
        """Lemma C.4 uses n = M t: the samples of all agents up to round t."""
        return self.n_agents * self.t

    def _observe(self, x: np.ndarray, y: np.ndarray) -> None:
        self.state._update_unchecked(x, y)
        self.local_cov += x[..., :, None] * x[..., None, :]
        self.local_bias += x * y[..., None]

    def end_round(self) -> None:
        super().end_round()
        if self.t % self.batch == 0:
            self.sync()

    def sync(self) -> None:
        """Lines 10-17: exchange batch statistics through the protocol, adopt the synced ones."""
        cov, bias = self.protocol.sync(self.local_cov, self.local_bias)
        gram = self.params.reg * np.eye(self.dim) + cov
        self.state.set(gram[:, None], bias[:, None])
        self.synced_cov, self.synced_bias = cov, bias
        self.local_cov[...] = 0.0
        self.local_bias[...] = 0.0
        self.sync_rounds += 1
        self.messages[:] = self.protocol.messages
        self.bytes_sent[:] = self.protocol.bytes_sent

    def report(self) -> dict[str, object]:
        return {"batch": self.batch, **self.protocol.privacy_report()}
