"""Parameters of the FCLUB family (Liu et al. 2022) and the privacy guarantee CDP-FCLUB-DC reports.

:class:`HomoParams`, :class:`HomoDCParams`, :class:`FCLUBParams`, :class:`FCLUBDCParams` and
:class:`CDPFCLUBDCParams` configure the policies of :mod:`fedbandits.algorithms.fclub`;
:func:`privacy_guarantee` is the (never formal) guarantee label of a CDP-FCLUB-DC report and why.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fedbandits.algorithms.clustering import ClusterUCBParams
from fedbandits.core.validation import check_choice, check_float
from fedbandits.privacy.cluster_tree import CALIBRATIONS
from fedbandits.privacy.guarantee import NOT_FORMAL

#: why CDP-FCLUB-DC's releases are not covered by its calibration
UNCOVERED = (
    "upload timing and cluster membership read raw data (side channel measured by `fedbandits audit schedule "
    "--algorithm cdp-fclub-dc`), and each local server picks its later users' arms from unreleased local data"
)


def privacy_guarantee(spent: float, epsilon: float) -> tuple[str, str]:
    """(``guarantee``, ``guarantee_reason``) of a CDP-FCLUB-DC report.

    Never "formal": the noisy sums are calibrated per (server, cluster) tree, but *when* they are
    uploaded and to which cluster depend on raw data, and local decisions read unreleased data
    (:mod:`fedbandits.privacy.guarantee`).  The reason says whether the sums alone meet the target.
    """
    meets = "meet" if spent <= epsilon else "exceed"
    sums = f"the noisy sums alone {meets} the target (epsilon_spent {spent:.6g} vs {epsilon:g})"
    return NOT_FORMAL, f"{UNCOVERED}; {sums}"


@dataclass(frozen=True)
class HomoParams(ClusterUCBParams):
    """Homo: all users one cluster, synchronous communication."""


@dataclass(frozen=True)
class HomoDCParams(HomoParams):
    """Homo-DC: all users one cluster, delayed (det-ratio triggered) communication."""

    upload: float = field(default=1.5, metadata={"help": "upload threshold U > 1 (Eq. 5)"})
    download: float = field(default=1.5, metadata={"help": "download threshold D > 1 (Eq. 6)"})

    def __post_init__(self) -> None:
        super().__post_init__()
        check_float("upload", self.upload, low=1.0, low_open=True)
        check_float("download", self.download, low=1.0, low_open=True)


@dataclass(frozen=True)
class FCLUBParams(ClusterUCBParams):
    """FCLUB (synchronous): cluster detection with instant sharing inside global clusters."""

    alpha1: float = field(default=1.5, metadata={"help": "edge-deletion parameter alpha_1 > 0 (Eq. 3)"})
    alpha2: float = field(default=1.5, metadata={"help": "merge parameter alpha_2 > 0 (Eq. 4)"})

    def __post_init__(self) -> None:
        super().__post_init__()
        check_float("alpha1", self.alpha1, low=0.0, low_open=True)
        check_float("alpha2", self.alpha2, low=0.0, low_open=True)


@dataclass(frozen=True)
class FCLUBDCParams(FCLUBParams):
    """FCLUB-DC: cluster detection with delayed (det-ratio triggered) communication."""

    upload: float = field(default=1.5, metadata={"help": "upload threshold U > 1 (Eq. 5)"})
    download: float = field(default=1.5, metadata={"help": "download threshold D > 1 (Eq. 6)"})

    def __post_init__(self) -> None:
        super().__post_init__()
        check_float("upload", self.upload, low=1.0, low_open=True)
        check_float("download", self.download, low=1.0, low_open=True)


@dataclass(frozen=True)
class CDPFCLUBDCParams(FCLUBDCParams):
    """CDP-FCLUB-DC: FCLUB-DC with tree-privatized uploads (Algorithms 1-5)."""

    epsilon: float = field(default=1.0, metadata={"help": "per-tree privacy target epsilon > 0"})
    delta: float = field(default=0.1, metadata={"help": "privacy delta in (0, 1)"})
    calibration: str = field(
        default="paper", metadata={"help": "'paper' (nu = ceil(log2(t_c+1)) + 1) or 'exact' (floor + 1)"}
    )
    rho_scale: float = field(default=1.0, metadata={"help": "multiplier of rho of Eq. (7), > 0 (1 = the paper)"})
    feature_bound: float = field(default=1.0, metadata={"help": "clip ||x|| to this L > 0"})
    reward_bound: float = field(default=1.0, metadata={"help": "clip rewards to [0, B], B > 0"})

    def __post_init__(self) -> None:
        super().__post_init__()
        check_float("epsilon", self.epsilon, low=0.0, low_open=True)
        check_float("delta", self.delta, low=0.0, high=1.0, low_open=True, high_open=True)
        check_choice("calibration", self.calibration, CALIBRATIONS)
        check_float("rho_scale", self.rho_scale, low=0.0, low_open=True)
        check_float("feature_bound", self.feature_bound, low=0.0, low_open=True)
        check_float("reward_bound", self.reward_bound, low=0.0, low_open=True)
