"""What ``fedbandits quickstart`` (src/fedbandits/quickstart.toml) shows a new user: no warning about its
own config, and the project's best private mode (``distributed-dp``, factorized, centred rewards) below the
independent agents it is compared with.  One run of the quickstart as shipped (seed 2023, 4 runs, T = 2,000:
about 10 s of compute), in this process."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import fedbandits
from fedbandits.cli import main

INDEPENDENT, DDP, LDP = "independent agents", "DDP-FedLinUCB B=25 eps=1", "LDP-FedLinUCB B=25 eps=5"
#: the distributed-dp line's final regret over the independent agents' must stay below this.  Measured with
#: the quickstart's own 4 runs on three seeds: 1370 / 1546 = 0.89 (seed 2023, the one shipped), 1228 / 1525 =
#: 0.81 (777), 1381 / 1516 = 0.91 (4242); 0.95 sits above all three and still fails a private line that only
#: ties the baseline (the tuned B = 0.5 line ends at 0.44, the untuned ldp line the quickstart had at 0.98)
DDP_OVER_INDEPENDENT = 0.95


def test_the_quickstart_warns_about_nothing_and_its_ddp_line_ends_below_independent_agents(tmp_path: Path) -> None:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        assert main(["quickstart", "--out", str(tmp_path / "q"), "--workers", "1", "--no-progress"]) == 0
    assert "warning" not in err.getvalue(), err.getvalue()  # no clipping or privacy-unit warning, nothing
    summary = json.loads((tmp_path / "q" / "summary.json").read_text(encoding="utf-8"))
    final = {s["label"]: s["final_regret_mean"] for s in summary["algorithms"]}
    assert final[DDP] < DDP_OVER_INDEPENDENT * final[INDEPENDENT], final
    assert final[LDP] < final[INDEPENDENT], final  # 0.75, 0.70, 0.70 of it on the three seeds above


def test_the_quickstart_private_lines_are_the_documented_ones() -> None:
    """The lines the quickstart's comments and examples/quickstart-grid.toml describe: centred rewards
    (c = 0.5) clipped to c +- 1.32, distributed-dp with the factorized release and the uneven split."""
    entries = {a.label: a.params for a in fedbandits.quickstart_config().algorithms}
    ddp, ldp = entries[DDP], entries[LDP]
    assert (ddp.protocol, ddp.mechanism, ddp.bias_noise_ratio, ddp.epsilon, ddp.delta) == (
        "distributed-dp",
        "factorized",
        0.5,
        1.0,
        1e-5,
    )
    assert (ldp.protocol, ldp.epsilon) == ("ldp", 5.0)
    for params in (ddp, ldp, entries[INDEPENDENT]):
        assert params.reward_offset == 0.5
    # 0.5 + 0.5 x 1.645: gaussian-sphere's mean rewards in [0, 1] and its reward noise's (sd 0.5) one-sided
    # 95% quantile, so at most about 5% of any arm's rewards are clipped
    assert ddp.reward_bound == ldp.reward_bound == 1.32
