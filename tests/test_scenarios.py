"""One scenario, one dataclass (issue 42, 1): the command line's flags, the sweep's allowed parameters and the
public functions of bench and simulate are all read from the scenario's fields, and its checks run when it is
built, whoever builds it."""

from __future__ import annotations

import argparse
import dataclasses
import inspect

import pytest

from tgi_toolkit import bench, simulate
from tgi_toolkit.bench import api as bench_api
from tgi_toolkit.bench.cli import add_parser, scenario_params
from tgi_toolkit.bench.errors import BenchError
from tgi_toolkit.scenarios import SCENARIOS, ConcurrencyScenario, RateScenario, check_scenario
from tgi_toolkit.simulate import api as simulate_api
from tgi_toolkit.sweep.grid import SweepError, Workload


def parsed(argv: list[str]) -> argparse.Namespace:
    root = argparse.ArgumentParser(prog="tgi-toolkit")
    add_parser(root.add_subparsers(dest="command"))
    return root.parse_args(["bench", *argv])


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_every_reader_takes_the_parameters_from_the_dataclass(name):
    cls = SCENARIOS[name]
    fields = [f.name for f in dataclasses.fields(cls)]
    for function in (bench_api.SCENARIO_FUNCTIONS[name], simulate_api.SCENARIO_FUNCTIONS[name]):
        params = inspect.signature(function).parameters
        assert [n for n, p in params.items() if p.kind is p.KEYWORD_ONLY] == fields
        assert all(params[f.name].default == f.default for f in dataclasses.fields(cls))
    args = parsed([name.replace("_", "-")])
    assert all(hasattr(args, n) for n in fields)  # one flag per field
    # a flag left out is the field's default; the scenario the command line makes is the default one
    assert cls(**scenario_params(args)) == cls()
    with pytest.raises(SweepError, match=r"'no_such' is not a parameter"):
        Workload(name, no_such=1)


def test_flags_given_make_the_scenario_the_api_would():
    args = parsed(["rate", "--rate", "2", "--rate", "4", "--arrival", "constant", "--prompt-tokens", "16",
                   "--requests", "8"])
    assert RateScenario(**scenario_params(args)) == RateScenario(rates=[2, 4], arrival="constant", prompt_tokens=16,
                                                                 requests=8)
    assert RateScenario(rates=[2, 4]).rates == (2.0, 4.0)  # lists normalised: equal whatever the spelling


@pytest.mark.parametrize("build,message", [
    (lambda: RateScenario(rates=[0]), "rate: 0.0 is not allowed"),
    (lambda: RateScenario(arrival="burst"), "arrival: 'burst' is not known (allowed: constant, poisson)"),
    (lambda: ConcurrencyScenario(users=[4], requests=2), "requests: 2 is fewer than 4 users"),
    (lambda: ConcurrencyScenario(ramp_up=-1), "ramp_up: -1 is not allowed"),
    (lambda: check_scenario("batch", {"batch_sizes": [0]}), "batch_size: 0 is not allowed"),
    (lambda: check_scenario("ingestion", {"prompt_tokens": [64, 64]}), "prompt_tokens: a fit needs at least two"),
])
def test_a_scenario_checks_its_values_when_built(build, message):
    with pytest.raises(BenchError, match=message.replace("(", r"\(").replace(")", r"\)")):
        build()


def test_the_simulator_refuses_what_the_bench_refuses_before_running():
    with pytest.raises(BenchError, match="users: 0 is not allowed"):
        simulate.run_concurrency("unused.json", users=[0])  # refused before the cost model is read
    with pytest.raises(BenchError, match="groups"):
        bench.run_shared_prefix("http://127.0.0.1:9", groups=0)  # refused before the server is reached
