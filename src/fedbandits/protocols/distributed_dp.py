"""Distributed DP with secure aggregation: protocol ``distributed-dp`` (P = (R, S, A)).

* R (every silo, :class:`DistributedRandomizer`): the node p-sums of ``ldp``'s tree (exact,
  clipped statistics), encoded on the integer grid, plus one *share* of discrete Gaussian noise
  per entry, reduced modulo 2^bits (:mod:`fedbandits.privacy.distributed_noise`);
* S (:class:`SimulatedSecureSum`): secure aggregation -- every silo adds a mask, the masks of the
  silos that answered cancel (dropped silos' masks are removed by the recovery step), and the
  server's aggregation code receives only masked messages and returns their modular sum;
* A (the server): the centred decoding of that sum, rescaled, is the synchronised node p-sum;
  prefix sums are released as in Algorithm 2.

With ``mechanism = "factorized"`` R encodes (B gamma)_k, the square-root factor applied to the
silo's batches (:class:`fedbandits.privacy.factorization.BandedEncoder`), instead of the node
p-sum, and A decodes the prefix with the other factor; the calibration composes the messages one
user enters with their own sensitivities (:func:`fedbandits.privacy.distributed_noise.calibrate_distributed`).
``mechanism = "banded"`` is the same with the streaming banded square root
(:class:`fedbandits.privacy.streaming.BandedStream`): no planned horizon, the last ``band`` batches of state.
A message lost to a dropout is missing from every later prefix with weight a_{k'-k} (the tree
instead recovers that data at the next higher node).

Agents act on the released prefixes only: the protocol is lazy by construction
(:class:`fedbandits.algorithms.fedlinucb.FedLinUCBParams` refuses ``lazy = false`` with it).

The simulator's masks are uniform on (Z / 2^bits)^P subject to summing to zero over the M silos,
drawn from the run's second protocol stream.  With every silo present that is exactly the joint
distribution of pairwise-masked messages (any M - 1 of them are uniform and independent, their sum
is fixed); the deployment derives them from pairwise key agreement instead.  Integer arithmetic is
exact: uint64 wraps modulo 2^64, a multiple of 2^bits.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction

import numpy as np

from fedbandits.privacy.discrete_gaussian import sample_discrete_gaussian
from fedbandits.privacy.distributed_noise import DistributedCalibration, ModularCodec, sample_shares
from fedbandits.privacy.factorization import BandedEncoder, Factorization, FactorizedAnalyzer, factorize
from fedbandits.privacy.guarantee import NOT_FORMAL
from fedbandits.privacy.mechanisms import pack, packed_width, protocol_streams, unpack
from fedbandits.privacy.streaming import BandedStream, BandedStreamEncoder, StreamingAnalyzer
from fedbandits.privacy.tree import lowest_set_bit, max_nodes_per_datum, prefix_levels
from fedbandits.protocols.base import FLOAT_BYTES, Protocol


class DistributedRandomizer:
    """Every silo's R for R runs x M silos: exact tree p-sums, encoded, plus a noise share.

    ``rngs``: one Generator per run; silo i of run r draws its shares from ``rngs[r].spawn(M)[i]``
    only, as :class:`fedbandits.privacy.mechanisms.TreeRandomizer` does.  ``sigma`` is the share's
    discrete Gaussian parameter in grid steps (the audit's test-only hook may shrink it).
    """

    def __init__(
        self,
        n_runs: int,
        n_silos: int,
        codec: ModularCodec,
        sigma: float,
        rngs: Sequence[np.random.Generator],
        releases: int,
        factorization: Factorization | BandedStream | None = None,
    ) -> None:
        if len(rngs) != n_runs:
            raise ValueError(f"need one Generator per run ({n_runs}), got {len(rngs)}")
        self.codec = codec
        self.sigma = sigma
        self.silo_rngs = [rng.spawn(n_silos) for rng in rngs]
        self.releases = releases
        shape = (n_runs, n_silos, codec.steps.size)
        #: factorized / banded: the silos' (B gamma)_k instead of the tree's node p-sums
        self.encoder: BandedEncoder | BandedStreamEncoder | None = None
        if isinstance(factorization, BandedStream):
            self.encoder = factorization.encoder(shape)
        elif factorization is not None:
            self.encoder = BandedEncoder(shape, factorization)
        #: a streaming encoder has no planned horizon
        self.streaming = isinstance(factorization, BandedStream)
        self.levels = max_nodes_per_datum(releases)
        self.exact = np.zeros((self.levels if self.encoder is None else 0, *shape))
        self.k = 0

    def release(self, gamma: np.ndarray) -> np.ndarray:
        """Release k + 1: every silo's encoded, noisy node p-sum modulo 2^bits, ``(R, M, P)`` uint64."""
        if self.k >= self.releases and not self.streaming:
            raise ValueError(f"the tree was planned for {self.releases} releases; release {self.k + 1} exceeds it")
        node = self._absorb(gamma)
        return self.codec.residues(self.codec.encode(node) + self._shares(node.shape[-1]))

    def skip(self) -> None:
        """Release k + 1 is not made (a deployed silo that was down): the tree absorbs its lower
        levels as an empty batch would, and nothing is drawn or sent."""
        self._absorb(np.zeros(self.exact.shape[1:]))

    def _absorb(self, gamma: np.ndarray) -> np.ndarray:
        """The data part of release k + 1: the tree's node p-sum, or the factorized (B gamma)_k."""
        if self.encoder is not None:
            self.k += 1
            return self.encoder.encode(gamma)
        k = self.k + 1
        level = lowest_set_bit(k)
        node = gamma + self.exact[:level].sum(axis=0)
        self.exact[level] = node
        self.exact[:level] = 0.0  # absorbed into this node
        self.k = k
        return node

    def _shares(self, width: int) -> np.ndarray:
        """One noise share per silo and entry, ``(R, M, P)`` int64, each silo from its own stream."""
        return np.stack(
            [np.stack([sample_shares(rng, self.sigma, width) for rng in silos]) for silos in self.silo_rngs]
        )


class SecretDistributedRandomizer(DistributedRandomizer):
    """One silo's ``distributed-dp`` randomizer with secret shares (a deployed silo's, or an online
    agent's): every share is an exact discrete Gaussian N_Z(0, s^2) drawn with the OS CSPRNG --
    exactly the law the calibration assumes (KLS21 Prop. 14), so no separate accounting is needed.
    Nothing secret is kept in the object: a node is released once, with a fresh share."""

    def _shares(self, width: int) -> np.ndarray:
        s2 = Fraction(self.sigma) ** 2
        return np.array([sample_discrete_gaussian(s2) for _ in range(width)], dtype=np.int64).reshape(1, 1, width)


class ModularTreeAnalyzer:
    """The server's A: decoded node sums (exact integers, grid steps) and their prefix release."""

    def __init__(self, n_runs: int, codec: ModularCodec, releases: int) -> None:
        self.codec = codec
        self.synced = np.zeros((max_nodes_per_datum(releases), n_runs, codec.steps.size), dtype=np.int64)
        self.k = 0

    def release(self, total: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Take release k + 1's modular sum ``(R, P)``; return (its decoded node sum, the prefix), data units."""
        k = self.k + 1
        level = lowest_set_bit(k)
        self.synced[level] = self.codec.centred(total)
        self.synced[:level] = 0
        self.k = k
        return self.codec.decode(self.synced[level]), self.codec.decode(self.synced[prefix_levels(k)].sum(axis=0))


class ModularFactorizedAnalyzer:
    """The server's A for a factorized (or streaming banded) release: decoded message sums, and the prefix
    A (their sum)."""

    def __init__(self, n_runs: int, codec: ModularCodec, factorization: Factorization | BandedStream) -> None:
        self.codec = codec
        shape = (n_runs, codec.steps.size)
        self.decoder: FactorizedAnalyzer | StreamingAnalyzer = (
            StreamingAnalyzer(shape, factorization)
            if isinstance(factorization, BandedStream)
            else FactorizedAnalyzer(shape, factorization)
        )

    @property
    def k(self) -> int:
        return self.decoder.k

    def release(self, total: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Take release k + 1's modular sum ``(R, P)``; return (its decoded message sum, the prefix), data units."""
        message_sum = self.codec.decode(self.codec.centred(total))
        return message_sum, self.decoder.release_sum(message_sum)


class SimulatedSecureSum:
    """S: masking by the silos and modular summation by the server, for R runs x M silos."""

    def __init__(self, n_runs: int, n_silos: int, bits: int, rngs: Sequence[np.random.Generator]) -> None:
        self.n_silos = n_silos
        self.modulus_mask = np.uint64((1 << bits) - 1)
        self.rngs = list(rngs)
        self._masks: np.ndarray | None = None

    def mask(self, residues: np.ndarray) -> np.ndarray:
        """Each silo's masked message ``(R, M, P)``; the masks of one run sum to 0 modulo 2^bits."""
        _, silos, width = residues.shape
        masks = np.empty_like(residues)
        for r, rng in enumerate(self.rngs):
            free = rng.bit_generator.random_raw(size=(silos - 1) * width).reshape(silos - 1, width)
            masks[r, : silos - 1] = free
            masks[r, silos - 1] = np.uint64(0) - free.sum(axis=0, dtype=np.uint64)
        masks &= self.modulus_mask
        self._masks = masks
        return (residues + masks) & self.modulus_mask

    def recover(self, present: np.ndarray) -> np.ndarray:
        """The recovery step for the silos that did not answer: the sum of their masks ``(R, P)``.

        In the deployment the server rebuilds it from the survivors' shares of the dropped silos'
        keys; here it is read from the masks drawn in :meth:`mask`.
        """
        assert self._masks is not None
        return (self._masks * (~present)[..., None].astype(np.uint64)).sum(axis=1, dtype=np.uint64)

    def aggregate(self, messages: np.ndarray, present: np.ndarray, recovered: np.ndarray) -> np.ndarray:
        """The server's side: the modular sum of the messages that arrived, unmasked by the recovered
        masks of those that did not.  It sees masked messages only."""
        arrived = (messages * present[..., None].astype(np.uint64)).sum(axis=1, dtype=np.uint64)
        return (arrived + recovered) & self.modulus_mask


class DistributedDPProtocol(Protocol):
    """Distributed discrete Gaussian shares, secure aggregation, tree prefix release (KLS21)."""

    name = "distributed-dp"
    description = (
        "distributed DP: discrete Gaussian noise shares on an integer grid, secure aggregation of the "
        "modular sum, tree prefix release (Kairouz, Liu & Steinke 2021); lazy"
    )

    def __init__(
        self,
        n_runs: int,
        n_agents: int,
        dim: int,
        calibration: DistributedCalibration,
        rngs: Sequence[np.random.Generator],
        record: bool = False,
    ) -> None:
        super().__init__(n_runs, n_agents, dim)
        self.calibration = calibration
        self.codec = calibration.codec(dim)
        streams = [protocol_streams(rng) for rng in rngs]
        factor: Factorization | BandedStream | None = None
        if calibration.mechanism == "factorized":
            factor = factorize(calibration.releases)
        elif calibration.mechanism == "banded":
            factor = calibration.stream
        self.randomizer = DistributedRandomizer(
            n_runs,
            n_agents,
            self.codec,
            calibration.share_sigma,
            [noise for noise, _ in streams],
            calibration.releases,
            factor,
        )
        self.secure_sum = SimulatedSecureSum(n_runs, n_agents, calibration.bits, [masks for _, masks in streams])
        self.analyzer: ModularTreeAnalyzer | ModularFactorizedAnalyzer = (
            ModularTreeAnalyzer(n_runs, self.codec, calibration.releases)
            if factor is None
            else ModularFactorizedAnalyzer(n_runs, self.codec, factor)
        )
        self.min_present = n_agents
        self.short_rounds = 0  # rounds with more missing silos than ``dropouts`` provisions for
        self.transcript: list[dict[str, object]] | None = [] if record else None

    def sync(
        self, cov: np.ndarray, bias: np.ndarray, present: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """One round; ``present (R, M)`` bool marks the silos whose message arrived (default: all)."""
        if present is None:
            present = np.ones((self.n_runs, self.n_agents), dtype=bool)
        present = np.asarray(present, dtype=bool)
        if present.shape != (self.n_runs, self.n_agents):
            raise ValueError(f"present must have shape ({self.n_runs}, {self.n_agents}), got {present.shape}")
        residues = self.randomizer.release(pack(cov, bias))
        messages = self.secure_sum.mask(residues)
        total = self.secure_sum.aggregate(messages, present, self.secure_sum.recover(present))
        node_sum, prefix = self.analyzer.release(total)
        k = self.analyzer.k
        counts = present.sum(axis=1)
        if (counts > 0).any():  # a round nobody answered releases no one's data
            self.min_present = min(self.min_present, int(counts[counts > 0].min()))
        self.short_rounds += int((counts < self.n_agents - self.calibration.dropouts).any())
        if self.transcript is not None:
            self.transcript.append(
                {
                    "sync": k,
                    "messages": messages,  # masked residues: what the secure aggregation receives
                    "present": present.copy(),
                    "sum": node_sum,  # the server's decoded node sum
                    "sigma": self.codec.steps * self.randomizer.sigma,  # std bound of one silo's share
                }
            )
        self._count_round()
        return unpack(prefix, self.dim)

    def _count_round(self) -> None:
        """M uplink messages of P residues (ceil(bits / 8) bytes each), M downlink float prefixes."""
        self.syncs += 1
        width = packed_width(self.dim)
        self.messages += 2 * self.n_agents
        self.bytes_sent += self.n_agents * width * (math.ceil(self.calibration.bits / 8) + FLOAT_BYTES)

    def privacy_report(self) -> dict[str, object]:
        cal = self.calibration
        out = cal.report()
        delivered = cal.epsilon_with(self.min_present - cal.colluders)
        out.update({"epsilon_delivered": delivered, "min_present": self.min_present, "short_rounds": self.short_rounds})
        if delivered > cal.epsilon * (1.0 + 1e-9):
            out["guarantee"] = NOT_FORMAL
            out["guarantee_reason"] = (
                f"a round closed with {self.min_present} of {self.n_agents} silos, more missing than the "
                f"{cal.dropouts} dropouts the noise was provisioned for: epsilon delivered {delivered:.6g} > "
                f"target {cal.epsilon:g} (with {cal.colluders} colluders)"
            )
        return out
