"""Closed-loop users out of step: the ramp that spreads their starts, and the check that they stayed spread.

Users who all start at one instant with requests of one length stay in lockstep for the whole point: every wave
of prompts queues behind itself (high TTFT) and then decodes undisturbed (low ITL), a server no real population
of users would see (docs/measurement.md, "Ramp-up and phase"). The ramp starts user i at i/N of `ramp_s`
(guidellm's `rampup_duration`); requests sent before the ramp ends warm the point up and are not measured.
"auto" makes the ramp one cycle at the point's load: one request a user, sent together and not measured, and
their mean duration (`cycle_seconds`). `phase_columns` reads the measured send times afterwards: the share of
requests sent within one decode step of another one, against the share users at independent phases would give by
chance, and flags the point `lockstep` when most of the excess over chance is there.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from tgi_toolkit import schema as S
from tgi_toolkit.bench.errors import BenchError

AUTO = "auto"
# `lockstep` when the share of synchronised arrivals covers more than this much of the way from what
# independent phases give by chance (0) to every arrival synchronised (1): Cohen's kappa past one half.
LOCKSTEP_EXCESS = 0.5


def check_ramp(value: Any) -> float | str:
    """`ramp_up` as given: "auto", or seconds >= 0 (0: every user starts at once, in lockstep)."""
    if isinstance(value, str) and value.strip().lower() == AUTO:
        return AUTO
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        seconds = math.nan
    if isinstance(value, bool) or not (seconds >= 0 and math.isfinite(seconds)):
        raise BenchError("ramp_up", f"{value!r} is not allowed",
                         '"auto" (one cycle at the point\'s load: a request a user, sent together), or seconds >= 0 '
                         '(0: all at once)')
    return seconds


def resolve_ramp(ramp_up: float | str, users: int) -> float | str:
    """The ramp a point of `users` users gets: one user has no one to be in step with, so "auto" is 0 there."""
    return 0.0 if ramp_up == AUTO and users == 1 else ramp_up


def cycle_seconds(probes: Sequence[Any]) -> float:
    """"auto"'s ramp: the mean duration of `probes`, one request a user sent together (records with `ok`,
    `sent_ns`, `token_ns`), i.e. how long a closed-loop user's cycle takes at the point's load; 0 if none ran.
    A request alone is the shortest cycle: with 16 users a step took 3x one user's, and starts spread over
    one request alone's duration packed them into a quarter of their cycle, where they ran in lockstep."""
    durations = [(r.token_ns[-1] - r.sent_ns) / 1e9 for r in probes if r.ok and r.token_ns]
    return sum(durations) / len(durations) if durations else 0.0


def ramp_offsets(users: int, ramp_s: float) -> list[float]:
    """When each user sends its first request, in seconds from the point's start: user i at i/N of the ramp."""
    return [i * ramp_s / users for i in range(users)]


def synchronised_share(sent_s: Sequence[float], step_s: float) -> float:
    """Share of requests sent within `step_s` (one decode step) of another request's send time."""
    times = sorted(sent_s)
    if len(times) < 2 or not step_s > 0:
        return math.nan
    close = 0
    for i, t in enumerate(times):
        before = i > 0 and t - times[i - 1] <= step_s
        after = i + 1 < len(times) and times[i + 1] - t <= step_s
        close += before or after
    return close / len(times)


def chance_share(sent_s: Sequence[float], step_s: float) -> float:
    """The share `synchronised_share` gives for sends at the same mean rate with independent phases
    (a Poisson stream of rate r: another send within +-step with probability 1 - exp(-2 r step))."""
    if len(sent_s) < 2 or not step_s > 0:
        return math.nan
    span = max(sent_s) - min(sent_s)
    if span <= 0:
        return math.nan  # all at once: no rate to compare with
    rate = (len(sent_s) - 1) / span
    return 1.0 - math.exp(-2.0 * rate * step_s)


def is_lockstep(share: float, chance: float) -> bool:
    """More than LOCKSTEP_EXCESS of the way from chance to every arrival synchronised (with no rate to
    compare with, every request sent at once, more than half synchronised)."""
    if not share == share:  # NaN: one request, or no decode step to compare with
        return False
    if not chance == chance or chance >= 1.0:
        return share > LOCKSTEP_EXCESS
    return (share - chance) / (1.0 - chance) > LOCKSTEP_EXCESS


def phase_columns(sent_s: Sequence[float], step_s: float, ramp_s: float) -> dict[str, Any]:
    """A closed-loop point's phase columns from its measured requests' send times and its ITL p50."""
    share, chance = synchronised_share(sent_s, step_s), chance_share(sent_s, step_s)
    return {S.RAMP_UP_S: float(ramp_s), S.ARRIVAL_SYNC_SHARE: share, S.ARRIVAL_SYNC_CHANCE: chance,
            S.LOCKSTEP: is_lockstep(share, chance)}
