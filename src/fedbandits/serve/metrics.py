"""Request latencies and the Prometheus text exposition of a serving silo's status.

Latencies are measured inside the handler (from the first line of the route to its answer, the
event log's commit included; not the HTTP parsing before it).  Percentiles are over the last
10,000 requests of each kind; the histogram counts every request since the start.
"""

from __future__ import annotations

import bisect
from collections import deque
from typing import Any

import numpy as np

#: histogram bucket upper bounds, seconds
BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.5, 1.0)


class Latencies:
    """Seconds per request: a window of the last ``window`` for percentiles and a cumulative histogram."""

    def __init__(self, window: int = 10_000) -> None:
        self.recent: deque[float] = deque(maxlen=window)
        self.buckets = [0] * (len(BUCKETS) + 1)
        self.count = 0
        self.total = 0.0

    def add(self, seconds: float) -> None:
        self.recent.append(seconds)
        self.buckets[bisect.bisect_left(BUCKETS, seconds)] += 1
        self.count += 1
        self.total += seconds

    def percentiles(self) -> dict[str, float | None]:
        if not self.recent:
            return {"p50": None, "p99": None}
        p50, p99 = np.percentile(np.fromiter(self.recent, float), [50, 99])
        return {"p50": round(1000 * float(p50), 4), "p99": round(1000 * float(p99), 4)}


#: status fields exported as gauges: name -> help
GAUGES = {
    "decisions": "decisions served since the service's state began",
    "rewarded": "rewards learned",
    "pending": "decisions waiting for their reward",
    "expired": "decisions that expired without a reward",
    "late_rewards": "rewards refused because their decision had expired",
    "batch_samples": "completed decisions waiting for the next release",
    "syncs": "releases made (all epochs)",
    "adopted": "federation prefixes adopted",
    "epsilon_spent": "epsilon spent in the current budget epoch",
    "epsilon_lifetime": "epsilon spent over every budget epoch (basic composition)",
    "releases_left": "releases left in the current budget epoch",
    "prefix_noise_std": "streaming release: std of a covariance entry's noise in the synced prefix now",
    "prefix_noise_std_at_10x": "streaming release: that std at 10 times the releases made",
    "epoch": "the current budget epoch (0 first)",
    "clipped": "observations clipped to the private bounds",
    "last_sync": "unix time of the last adopted prefix",
}


def prometheus_text(status: dict[str, Any], latencies: dict[str, Latencies]) -> str:
    lines: list[str] = []
    for key, text in GAUGES.items():
        value = status.get(key)
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue
        name = f"fedbandits_{key}"
        lines += [f"# HELP {name} {text}", f"# TYPE {name} gauge", f"{name} {float(value)!r}"]
    name = "fedbandits_request_seconds"
    lines += [f"# HELP {name} time inside the handler, event log commit included", f"# TYPE {name} histogram"]
    for route, lat in latencies.items():
        running = 0
        for bound, n in zip((*BUCKETS, float("inf")), lat.buckets, strict=True):
            running += n
            le = "+Inf" if bound == float("inf") else repr(bound)
            lines.append(f'{name}_bucket{{route="{route}",le="{le}"}} {running}')
        lines.append(f'{name}_sum{{route="{route}"}} {lat.total!r}')
        lines.append(f'{name}_count{{route="{route}"}} {lat.count}')
    refused = status.get("refused", {})
    name = "fedbandits_refused_total"
    lines += [f"# HELP {name} requests answered with a 4xx or 5xx", f"# TYPE {name} counter"]
    for code, n in refused.items():
        lines.append(f'{name}{{status="{code}"}} {n}')
    return "\n".join(lines) + "\n"
