"""vLLM's forward trace (server/vllm_trace/sitecustomize.py): the lines it writes per engine step, and how the
launcher's vllm backend turns it on. The real vLLM writing it is tested in test_server_vllm_real.py."""

import dataclasses
import importlib.util
import json
import os
import random
import sys
import types

import pytest

from tgi_toolkit.config import LauncherConfig
from tgi_toolkit.costs.features import Shape, shape_of
from tgi_toolkit.server.vllm import TRACE_HOOK, VllmBackend
from tgi_toolkit.simulate.trace import read_trace


@pytest.fixture
def hook(monkeypatch, tmp_path):
    """The hook's module, loaded as vLLM's interpreter loads it, with TGI_TOOLKIT_FORWARD_TRACE set."""
    path = tmp_path / "trace.jsonl"
    monkeypatch.setenv("TGI_TOOLKIT_FORWARD_TRACE", str(path))
    spec = importlib.util.spec_from_file_location("vllm_trace_hook", os.path.join(TRACE_HOOK, "sitecustomize.py"))
    module = importlib.util.module_from_spec(spec)
    meta_path = list(sys.meta_path)
    spec.loader.exec_module(module)
    monkeypatch.setattr(sys, "meta_path", meta_path)  # its finder out again: no vLLM is imported here
    module.trace_path = path
    return module


def test_a_step_line_holds_the_shapes_features_worked_by_hand(hook):
    # a 300-token prompt from scratch: 300 tokens, pairs 1 + 2 + ... + 300 = 45,150
    line = hook.step_line([(0, 300)], 0.45)
    assert (line["rows"], line["tokens"], line["context"], line["pairs"]) == (1, 300, 300, 45150)
    assert line["prefilling"] and (line["decode_rows"], line["decode_context"]) == (0, 0)
    assert line["first_tokens"] == 0 and hook.step_line([(0, 300)], 0.45, 1)["first_tokens"] == 1
    # a decode after 300 tokens (pairs 300 + 1) beside 44 new tokens after a cached 256: pairs 44 x 256 + 44 x 45 / 2
    # = 11,264 + 990; context 301 + 300
    line = hook.step_line([(300, 1), (256, 44)], 0.09)
    assert (line["rows"], line["tokens"], line["context"], line["pairs"]) == (2, 45, 601, 301 + 12254)
    assert line["prefilling"] and (line["decode_rows"], line["decode_context"]) == (1, 301)
    line = hook.step_line([(20, 1), (31, 1)], 0.03)
    assert not line["prefilling"] and (line["tokens"], line["decode_rows"], line["decode_context"]) == (2, 2, 53)


def test_a_step_line_has_the_features_the_simulator_gives_the_same_rows(hook):
    # the hook cannot import costs.features (it runs in vLLM's interpreter), so its copy is held to shape_of
    rng = random.Random(7)
    for _ in range(200):
        rows = [(rng.choice((0, rng.randrange(1, 900))), rng.choice((1, 1, rng.randrange(2, 300))))
                for _ in range(rng.randrange(1, 9))]
        forward = types.SimpleNamespace(rows=[types.SimpleNamespace(start=a, length=n) for a, n in rows])
        line = hook.step_line(rows, 0.01)
        assert {k: line[k] for k in dataclasses.asdict(shape_of(forward))} == dataclasses.asdict(shape_of(forward))


class Request:
    def __init__(self, computed: int, prompt: int, output: list[int]) -> None:
        self.num_computed_tokens, self.num_prompt_tokens, self.output_token_ids = computed, prompt, output


class Scheduler:
    """vLLM's contract as the hook reads it: schedule() advances each request's num_computed_tokens by what it
    scheduled and returns num_scheduled_tokens by request id."""

    def __init__(self, plan: list[dict[str, int]]) -> None:
        # a: a new prompt of 16 tokens; b: preempted with a prompt of 30 and 18 tokens out, recomputing them (24 done)
        self.requests = {"a": Request(0, 16, []), "b": Request(24, 30, [7] * 18)}
        self.plan = plan

    def schedule(self, throttle: bool = False):
        scheduled = self.plan.pop(0)
        for rid, n in scheduled.items():
            self.requests[rid].num_computed_tokens += n
        return types.SimpleNamespace(num_scheduled_tokens=scheduled)


class EngineCore:
    def __init__(self, plan: list[dict[str, int]], pipelined: bool = False) -> None:
        self.scheduler = Scheduler(plan)
        self.batch_queue = [] if pipelined else None

    def step(self):
        return self.scheduler.schedule(), True


def test_each_step_that_runs_rows_writes_one_line_read_back_as_its_shape(hook):
    module = types.SimpleNamespace(EngineCore=type("EngineCore", (EngineCore,), {}))
    hook.patch(module)
    engine = module.EngineCore([{"a": 16}, {"a": 1, "b": 8}, {}, {"a": 1}])
    for _ in range(4):
        engine.step()
    # the empty step is not a forward; the rest read back as the simulator's shapes, in order
    shapes = [shape for shape, seconds in read_trace(str(hook.trace_path))[0]]
    assert shapes == [Shape(1, 16, 16, 136, True), Shape(2, 9, 17 + 32, 17 + 8 * 24 + 36, True),
                      Shape(1, 1, 18, 18, False)]
    lines = [json.loads(line) for line in hook.trace_path.read_text().splitlines()]
    assert all(line["seconds"] >= 0 for line in lines)
    # a's prompt completes in the first step; b's recomputed prompt, completed in the second, gives no first token
    assert [line["first_tokens"] for line in lines] == [1, 0, 0]


def test_an_engine_that_pipelines_its_steps_writes_nothing(hook):
    module = types.SimpleNamespace(EngineCore=type("EngineCore", (EngineCore,), {}))
    hook.patch(module)
    engine = module.EngineCore([{"a": 16}], pipelined=True)
    assert engine.step()[1]
    assert hook.trace_path.read_text() == ""


def test_the_vllm_backend_puts_the_hook_first_on_pythonpath_only_when_a_trace_is_asked():
    env = {"PYTHONPATH": "/opt/mine"}
    VllmBackend().command(LauncherConfig(), "127.0.0.1", 8000, env)
    assert env["PYTHONPATH"] == "/opt/mine"
    env = {"PYTHONPATH": "/opt/mine", "TGI_TOOLKIT_FORWARD_TRACE": "/tmp/t.jsonl"}
    VllmBackend().command(LauncherConfig(), "127.0.0.1", 8000, env)
    assert env["PYTHONPATH"].split(os.pathsep) == [TRACE_HOOK, "/opt/mine"]
    assert os.path.isfile(os.path.join(env["PYTHONPATH"].split(os.pathsep)[0], "sitecustomize.py"))
    env = {"TGI_TOOLKIT_FORWARD_TRACE": "/tmp/t.jsonl"}
    VllmBackend().command(LauncherConfig(), "127.0.0.1", 8000, env)
    assert env["PYTHONPATH"] == TRACE_HOOK
