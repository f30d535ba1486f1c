"""Configuration labels in figures (issue 43 item 7): a legend names what differs between the configurations
compared, the hover text has every setting; the "all KV memory" configuration names cuda_memory_fraction=1.0."""

from __future__ import annotations

import pandas as pd
import pytest

from tgi_toolkit import plots
from tgi_toolkit import schema as S
from tgi_toolkit.bench import provenance
from tgi_toolkit.config import LauncherConfig
from tgi_toolkit.plots.labels import legend_name, settings_hover, short_labels
from tgi_toolkit.sweep import Sweep, Workload

BASE = {"max_input_tokens": 192, "max_total_tokens": 256, "max_batch_prefill_tokens": 256}


def label(**settings: object) -> str:
    return provenance.config_label(LauncherConfig(**{**BASE, **settings}))


def test_configurations_that_differ_in_one_field_are_named_by_it() -> None:
    a, b = label(max_batch_size=1), label(max_batch_size=4)
    assert a == "max_batch_prefill_tokens=256,max_batch_size=1,max_input_tokens=192,max_total_tokens=256"
    assert short_labels([a, b, a]) == {a: "max_batch_size=1", b: "max_batch_size=4"}


def test_configurations_that_differ_in_two_fields_are_named_by_both_in_the_labels_order() -> None:
    configs = [label(cuda_memory_fraction=f, max_batch_size=n) for f in (0.006867, 1.0) for n in (1, 4)]
    assert list(short_labels(configs).values()) == [
        "cuda_memory_fraction=0.006867, max_batch_size=1", "cuda_memory_fraction=0.006867, max_batch_size=4",
        "cuda_memory_fraction=1.0, max_batch_size=1", "cuda_memory_fraction=1.0, max_batch_size=4"]
    # a setting one configuration left at its default (not in its label) differs too, and says so
    assert short_labels(["a=1,b=2", "b=3"]) == {"a=1,b=2": "a=1, b=2", "b=3": "a=default, b=3"}
    assert short_labels(["max_batch_size=4", "default"]) == {"max_batch_size=4": "max_batch_size=4",
                                                            "default": "max_batch_size=default"}


def test_labels_that_are_not_settings_stay_as_they_are() -> None:
    assert short_labels(["ours", "reference:happy_vllm"]) == {"ours": "ours", "reference:happy_vllm":
                                                              "reference:happy_vllm"}
    lone = label(max_batch_size=4)
    assert short_labels([lone]) == {lone: lone}  # one configuration: nothing to tell apart, its full label
    # a value with commas of its own stays whole; a simulated configuration's suffix counts where it differs
    assert short_labels(["a=[1, 2],b=1", "a=[1, 2],b=2"]) == {"a=[1, 2],b=1": "b=1", "a=[1, 2],b=2": "b=2"}
    assert short_labels(["a=1 [simulated: L4]", "a=1 [simulated: A10G]"]) == {
        "a=1 [simulated: L4]": "[simulated: L4]", "a=1 [simulated: A10G]": "[simulated: A10G]"}
    # a simulated vLLM's settings, space-separated after a prefix
    vllm = ["vLLM V1 max_num_seqs=256 max_num_batched_tokens=2048 kv_capacity_tokens=8192 [simulated: L4]",
            "vLLM V1 max_num_seqs=8 max_num_batched_tokens=2048 kv_capacity_tokens=8192 [simulated: L4]"]
    assert list(short_labels(vllm).values()) == ["max_num_seqs=256", "max_num_seqs=8"]
    assert short_labels([*vllm, "max_batch_size=4"])[vllm[0]] == "vLLM V1, max_num_seqs=256, " \
        "max_num_batched_tokens=2048, kv_capacity_tokens=8192, max_batch_size=default, [simulated: L4]"


def test_the_all_kv_memory_configuration_names_its_fraction() -> None:
    # 1.0 is the default: a label of non-default settings alone said nothing of it (issue 43)
    sweep = Sweep(base=BASE, grid={"cuda_memory_fraction": [0.006867, 1.0]},
                  workloads=[Workload("concurrency", users=[1], prompt_tokens=64, max_new_tokens=8, requests=1)])
    small, whole = (c.config_label for c in sweep.configs())
    assert whole.startswith("cuda_memory_fraction=1.0,") and small.startswith("cuda_memory_fraction=0.006867,")
    assert list(short_labels([small, whole]).values()) == ["cuda_memory_fraction=0.006867",
                                                          "cuda_memory_fraction=1.0"]
    # the same serving settings keep one identity whether the default was written out or not
    assert provenance.config_id(LauncherConfig(cuda_memory_fraction=1.0)) == provenance.config_id(LauncherConfig())
    assert provenance.config_label(LauncherConfig()) == "default"


def test_a_figure_names_what_differs_in_its_legend_and_every_setting_in_its_hover() -> None:
    configs = [label(cuda_memory_fraction=f, max_batch_size=4) for f in (0.006867, 1.0)]
    points = pd.DataFrame([{S.CONFIG_LABEL: c, S.USERS: u, S.PROMPT_TOKENS: 192, S.MAX_NEW_TOKENS: 16,
                            S.OUTPUT_THROUGHPUT: 10.0 * u * (i + 1)} for i, c in enumerate(configs) for u in (1, 4)])
    fig = plots.throughput_vs_users(points)
    lines = [t for t in fig.data if t.showlegend is not False]
    # the lengths every line shares go to the subtitle, not into each legend entry
    assert [t.name for t in lines] == ["cuda_memory_fraction=0.006867", "cuda_memory_fraction=1.0"]
    assert fig.layout.title.subtitle.text == "prompt 192 / output 16 tokens"
    hover = lines[1].hovertemplate
    assert ("settings: cuda_memory_fraction=1.0, max_batch_prefill_tokens=256,<br>"
            "max_batch_size=4, max_input_tokens=192, max_total_tokens=256") in hover
    pareto = plots.pareto_plot(points.assign(ttft_p50_s=0.1))
    assert {t.name for t in pareto.data} >= {"cuda_memory_fraction=0.006867", "cuda_memory_fraction=1.0"}
    assert all("max_total_tokens=256" in t.hovertemplate for t in pareto.data if t.name.startswith("cuda"))
    requests = pd.DataFrame({S.CONFIG_LABEL: configs * 3, S.ITL_S: [[0.01, 0.02]] * 6})
    violins = plots.itl_distribution(requests, by=S.CONFIG_LABEL)
    assert [t.name for t in violins.data] == ["cuda_memory_fraction=0.006867", "cuda_memory_fraction=1.0"]
    assert "max_batch_size=4, max_input_tokens=192" in violins.data[1].hovertemplate


@pytest.mark.parametrize(("name", "wrapped"), [
    ("batch 4", "batch 4"),
    ("batch 1 · cuda_memory_fraction=0.006867, max_batch_prefill_tokens=512",
     "batch 1 ·<br>cuda_memory_fraction=0.006867,<br>max_batch_prefill_tokens=512"),
    ("cuda_memory_fraction=0.006867 / prompt 192 / output 16",
     "cuda_memory_fraction=0.006867 /<br>prompt 192 / output 16"),
    ("Pareto set: H100-80GB x2, H100-80GB, A100-80GB x2, A100-80GB",
     "Pareto set: H100-80GB x2,<br>H100-80GB, A100-80GB x2,<br>A100-80GB"),
    ("cuda_memory_fraction=0.002747, max_batch_size=1", "cuda_memory_fraction=0.002747,<br>max_batch_size=1"),
    ("seed 001 / prompt 1024 / output 128", "seed 001 / prompt 1024 / output 128"),
])
def test_a_long_legend_entry_wraps_instead_of_widening_the_legend(name: str, wrapped: str) -> None:
    assert legend_name(name) == wrapped


def test_hover_settings_wrap_between_settings() -> None:
    assert settings_hover(None) == [] and settings_hover("") == []
    assert settings_hover("a=1,b=2") == ["settings: a=1, b=2"]
    long = ",".join(f"setting_number_{i}=value_{i}" for i in range(4))
    assert settings_hover(long) == ["settings: setting_number_0=value_0, setting_number_1=value_1,",
                                    "setting_number_2=value_2, setting_number_3=value_3"]
