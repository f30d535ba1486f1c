"""Scenarios: one frozen dataclass per scenario (its parameters, defaults, checks and the workload it generates),
played by the HTTP harness (tgi_toolkit.bench) and by the simulator (tgi_toolkit.simulate), read by the sweep's
grid and the command line's flags. Below bench's players and the simulator; above bench's checks and plans."""

from tgi_toolkit.scenarios.base import Scenario
from tgi_toolkit.scenarios.kinds import (
    SCENARIOS,
    BatchScenario,
    ConcurrencyScenario,
    IngestionScenario,
    RateScenario,
    check_scenario,
    scenario_class,
)
from tgi_toolkit.scenarios.plans import DecodeStallScenario, MultiTurn, SharedPrefix
from tgi_toolkit.scenarios.shapes import LengthDistribution, Stage

__all__ = ["SCENARIOS", "BatchScenario", "ConcurrencyScenario", "DecodeStallScenario", "IngestionScenario",
           "MultiTurn", "RateScenario", "Scenario", "SharedPrefix", "check_scenario", "scenario_class",
           "LengthDistribution", "Stage"]
