"""The launcher form: field metadata per group (shared by every UI) and the ipywidgets form, driven headlessly."""

from __future__ import annotations

import shlex

import pytest

from tgi_toolkit.config import GROUPS, OPTIONS, QUANTIZE_VALUES, LauncherConfig
from tgi_toolkit.config.form import (
    MAIN_GROUPS,
    config_from_values,
    field_table,
    form_fields,
    raw_values,
    render_command,
)
from tgi_toolkit.config.widgets import launcher_form

# -- field metadata -------------------------------------------------------------------------------


def test_every_option_appears_once_grouped_with_the_five_main_groups_first():
    fields = form_fields()
    assert list(fields)[:5] == ["model", "limits", "batching", "quantization", "network"]
    assert set(fields) == set(GROUPS)
    names = [f.name for group in fields.values() for f in group]
    assert sorted(names) == sorted(OPTIONS) and len(names) == len(set(names))
    assert all(f.group == group for group, group_fields in fields.items() for f in group_fields)
    assert list(form_fields(["batching"])) == ["batching"]
    with pytest.raises(ValueError, match="unknown group"):
        form_fields(["gpu"])


def test_fields_carry_the_kind_choices_default_and_help_a_ui_needs():
    table = field_table()
    total = table["max_total_tokens"]
    assert (total.kind, total.optional, total.default, total.label) == ("int", True, None, "--max-total-tokens")
    assert total.placeholder == "auto" and "MAX_TOTAL_TOKENS" in total.tooltip
    assert table["waiting_served_ratio"].kind == "float" and table["waiting_served_ratio"].placeholder == "0.3"
    assert table["max_concurrent_requests"].placeholder == "128"  # an empty box means the default
    assert table["quantize"].kind == "choice" and table["quantize"].choices == QUANTIZE_VALUES
    assert table["sharded"].kind == "choice" and table["sharded"].choices == ("true", "false")
    assert table["json_output"].kind == "bool"
    assert table["cors_allow_origin"].kind == "list" and table["cuda_graphs"].kind == "list"
    assert table["model_id"].kind == "text" and table["model_id"].help
    assert table["api_key"].secret and not table["hostname"].secret


# -- values -> config ------------------------------------------------------------------------------


def test_default_values_give_the_default_config_with_nothing_marked_as_chosen():
    state = config_from_values(raw_values())
    assert state.problems == [] and state.config == LauncherConfig()
    assert state.config.model_fields_set == set()  # so Server still picks a free port


def test_values_round_trip_through_the_raw_widget_form():
    config = LauncherConfig(max_input_tokens=1000, max_total_tokens=2000, quantize="bitsandbytes-nf4",
                            dtype="bfloat16", sharded=False, cuda_graphs=[1, 2, 4], json_output=True,
                            cors_allow_origin=["http://a", "http://b"], waiting_served_ratio=0.5, port=8080)
    state = config_from_values(raw_values(config))
    assert state.problems == []
    assert state.config == config
    assert {"max_input_tokens", "quantize", "sharded", "port"} <= state.config.model_fields_set


def test_broken_rules_are_reported_with_their_fields_and_no_config():
    state = config_from_values({"max_input_tokens": "2048", "max_total_tokens": "1024"})
    assert state.config is None
    assert [p.fields for p in state.problems] == [("max_input_tokens", "max_total_tokens")]
    assert "must be < --max-total-tokens" in state.problems[0].message


def test_a_type_error_and_a_rule_elsewhere_are_reported_together():
    state = config_from_values({"max_total_tokens": "12x", "quantize": "eetq", "dtype": "bfloat16"})
    assert state.config is None
    assert state.fields == {"max_total_tokens", "quantize", "dtype"}
    assert any("expects an integer, got '12x'" in p.message for p in state.problems)


def test_empty_means_not_set_or_default_and_unknown_fields_are_refused():
    state = config_from_values({"max_batch_size": "", "max_concurrent_requests": " ", "sharded": ""})
    assert state.config == LauncherConfig()
    with pytest.raises(KeyError, match="max_tokens"):
        config_from_values({"max_tokens": "1"})


# -- command lines ---------------------------------------------------------------------------------


def test_command_lines_for_each_backend():
    config = LauncherConfig(max_total_tokens=2048, max_batch_size=8, api_key="s3cret", num_shard=2)
    embedded = render_command(config, "embedded")
    assert embedded.argv[:2] == ["tgi-toolkit", "serve"] and embedded.argv[2:] == config.to_cli()
    assert any("--num-shard" in note for note in embedded.notes)  # the CPU engine would refuse it
    assert "s3cret" not in embedded.text() and "--api-key '***'" in embedded.text()
    assert "s3cret" in embedded.text(redact=False)
    assert render_command(config, "tgi").argv == ["text-generation-launcher", *config.to_cli()]
    docker = render_command(config, "tgi-docker").text()
    assert docker.startswith("docker run --gpus all") and '"$PWD/data:/data"' in docker
    vllm = render_command(config, "vllm")
    assert shlex.split(vllm.text(redact=False))[:3] == ["vllm", "serve", config.model_id]
    assert "--max-model-len 2048" in vllm.text() and "--max-num-seqs 8" in vllm.text()
    assert "--tensor-parallel-size 2" in vllm.text()
    usage_off = render_command(LauncherConfig(usage_stats="off", max_input_tokens=100), "vllm")
    assert usage_off.text().startswith("VLLM_NO_USAGE_STATS=1 vllm serve")
    assert any(note.startswith("not carried over") and "max-model-len" in note for note in usage_off.notes)
    with pytest.raises(ValueError, match="target"):
        render_command(config, "sglang")


# -- the ipywidgets form, driven as a person types ---------------------------------------------------


def test_form_starts_valid_and_shows_the_embedded_command():
    form = launcher_form()
    assert form.problems == [] and form.config == LauncherConfig()
    assert form.command_text().startswith("tgi-toolkit serve --model-id HuggingFaceTB/SmolLM2-135M-Instruct")
    assert "valid launcher configuration" in form.problems_html.value
    assert [child.children for child in form.widget.children[0].children]  # one section per group
    assert form.widget.children[0].titles[:5] == MAIN_GROUPS


def test_form_checks_every_keystroke_and_marks_the_fields_involved():
    form = launcher_form()
    form.widgets["max_input_tokens"].value = "2048"
    seen = []
    for typed in ("1", "10", "102", "1024"):  # continuous_update: each keystroke sets .value
        form.widgets["max_total_tokens"].value = typed
        seen.append((form.config is None, [p.fields for p in form.problems]))
    assert all(invalid for invalid, _ in seen)
    assert seen[-1][1] == [("max_input_tokens", "max_total_tokens")]
    assert form.widgets["max_total_tokens"].layout.border and form.widgets["max_input_tokens"].layout.border
    assert form.widgets["model_id"].layout.border is None
    assert "must be &lt; --max-total-tokens" in form.problems_html.value
    assert "[max_input_tokens, max_total_tokens]" in form.problems_html.value
    assert form.command_text() == "" and "fix the problems" in form.command_html.value

    form.widgets["max_total_tokens"].value = "4096"
    assert form.problems == [] and form.config.max_total_tokens == 4096
    assert form.widgets["max_total_tokens"].layout.border is None
    assert "--max-input-tokens 2048 --max-total-tokens 4096" in form.command_text()


def test_form_switches_backend_and_follows_dropdowns_and_checkboxes():
    form = launcher_form(LauncherConfig(max_total_tokens=1024))
    assert form.widgets["max_total_tokens"].value == "1024"
    form.widgets["quantize"].value = "eetq"
    form.widgets["dtype"].value = "bfloat16"
    assert form.config is None and form.problems[0].fields == ("dtype", "quantize")
    form.widgets["quantize"].value = "bitsandbytes-nf4"
    form.widgets["json_output"].value = True
    form.widgets["api_key"].value = "s3cret"
    assert form.problems == []
    assert "--quantize bitsandbytes-nf4" in form.command_text() and "--json-output" in form.command_text()
    form.target_widget.value = "vllm"
    text = form.command_text()
    assert text.startswith("vllm serve") and "--max-model-len 1024" in text and "--quantization bitsandbytes" in text
    assert "s3cret" not in text and "s3cret" not in form.command_html.value
    assert "not carried over" in form.command_html.value  # --json-output has no vLLM flag
    form.target_widget.value = "tgi-docker"
    assert form.command_text().startswith("docker run") and "-e HF_TOKEN" in form.command_text()
    assert form.config.api_key == "s3cret"  # the config itself keeps the value


def test_form_of_an_invalid_config_shows_its_problems_at_once():
    config = LauncherConfig(max_total_tokens=1024, max_batch_total_tokens=512)
    form = launcher_form(config, target="tgi", groups=MAIN_GROUPS)
    assert list(form.fields) == list(MAIN_GROUPS) and "num_shard" not in form.widgets
    assert {"max_total_tokens", "max_batch_total_tokens"} <= {f for p in form.problems for f in p.fields}
    form.widgets["max_batch_total_tokens"].value = ""
    assert form.config == LauncherConfig(max_total_tokens=1024)
    assert form.command_text().startswith("text-generation-launcher")


def test_options_of_groups_not_shown_keep_their_values():
    form = launcher_form(LauncherConfig(num_shard=2, json_output=True), groups=("limits",))
    form.widgets["max_total_tokens"].value = "2048"
    assert form.config == LauncherConfig(num_shard=2, json_output=True, max_total_tokens=2048)
