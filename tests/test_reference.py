"""data/reference: the seeds' published numbers, transcribed exactly and read into our result schema."""

from __future__ import annotations

import json
import math
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest

from tgi_toolkit import reference
from tgi_toolkit import schema as S
from tgi_toolkit.bench.main_metrics import COLUMNS, METRICS, approx, kv_text, main_metrics, main_metrics_table
from tgi_toolkit.bench.results import Results, empty
from tgi_toolkit.config import LauncherConfig, from_vllm_table
from tgi_toolkit.config.vllm_args import parse_parameter_table
from tgi_toolkit.reference import list_references, load_reference, load_references

ROOT = Path(__file__).resolve().parents[1]
SEEDS = ROOT.parent / "shared" / "seeds"
DATA = ROOT / "data"
TGI = "tgi-benchmark-mt0-xxl"
CODELLAMA, PHI3 = "happy-vllm-codellama-7b-a100", "happy-vllm-phi-3-vision-h100"
PHI3_A100, PHI3_H100 = "happy-vllm-phi-3-vision-a100-rerun", "happy-vllm-phi-3-vision-h100-rerun"


def seed(prefix: str) -> str:
    path = next(SEEDS.glob(f"{prefix}_*.txt"), None)
    if path is None:
        pytest.skip(f"a transcription check against the original document (seed {prefix}), which is not in {SEEDS} "
                    "(the shared/ folder beside this project's checkout)")
    return path.read_text()


def markdown_rows(text: str, first_header: str) -> list[list[str]]:
    """Body rows of every Markdown table whose first header cell is `first_header`."""
    rows, inside = [], False
    for line in text.splitlines():
        if not line.strip().startswith("|"):
            inside = False
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells[0] == first_header:
            inside = True
        elif inside and not set(cells[0]) <= set("-: "):
            rows.append(cells)
    return rows


def test_lists_the_three_seed_sets_and_seed_003s_reruns():
    assert list_references() == [CODELLAMA, PHI3_A100, PHI3, PHI3_H100, TGI]
    assert set(load_references()) == {CODELLAMA, PHI3, PHI3_A100, PHI3_H100, TGI}


def test_unknown_name_says_what_exists():
    with pytest.raises(KeyError, match="tgi-benchmark-mt0-xxl"):
        load_reference("nope")


def test_another_data_folder(tmp_path):
    assert list_references(tmp_path) == []
    shutil.copytree(DATA / "reference" / TGI, tmp_path / "reference" / "mine")
    assert list_references(tmp_path) == ["mine"]
    assert load_reference("mine", data_dir=tmp_path).batch[S.BATCH_SIZE].tolist() == [16]


def test_the_data_folder_is_the_packages_then_the_checkouts_and_an_own_one_wins(tmp_path, monkeypatch):
    from tgi_toolkit import data_folder
    from tgi_toolkit.cookbook import example_results_dir

    monkeypatch.delenv("TGI_TOOLKIT_DATA", raising=False)
    installed, checkout = tmp_path / "site" / "tgi_toolkit" / "data", tmp_path / "checkout" / "data"
    monkeypatch.setattr(data_folder, "_PACKAGE_DATA", installed)
    monkeypatch.setattr(data_folder, "_CHECKOUT_DATA", checkout)
    with pytest.raises(FileNotFoundError, match=f"at {installed} nor at {checkout}; set TGI_TOOLKIT_DATA"):
        load_reference(TGI)
    with pytest.raises(FileNotFoundError, match=f"at {installed} nor at {checkout}"):
        example_results_dir()
    assert list_references() == []  # listing finds nothing rather than failing (the app starts without data)
    shutil.copytree(DATA / "reference" / TGI, checkout / "reference" / TGI)
    assert data_folder.default_data_dir() == checkout and list_references() == [TGI]
    shutil.copytree(DATA / "examples", installed / "examples")  # an installed wheel's data comes first
    assert data_folder.default_data_dir() == installed and example_results_dir().parent == installed / "examples"
    monkeypatch.setenv("TGI_TOOLKIT_DATA", str(tmp_path / "mine"))  # one's own wins, and alone
    assert data_folder.data_dirs() == [tmp_path / "mine"]
    with pytest.raises(FileNotFoundError, match=f"at {tmp_path / 'mine'};"):
        load_reference(TGI)


# -- seed 000: text-generation-benchmark --------------------------------------------------------------
def test_seed_000_published_tables_as_printed():
    tables = load_reference(TGI).tables
    prefill = tables[(tables["table"] == "latency") & (tables["step"] == "Prefill")].iloc[0]
    assert prefill["batch_size"] == 16 and prefill["unit"] == "ms"
    assert (prefill["average"], prefill["lowest"], prefill["highest"]) == (958.80, 946.70, 970.90)
    assert (prefill["p50"], prefill["p90"], prefill["p99"]) == (970.90, 970.90, 970.90)
    decode = tables[(tables["table"] == "throughput") & (tables["step"] == "Decode")].iloc[0]
    assert (decode["average"], decode["unit"]) == (131.28, "tokens/secs") and math.isnan(decode["p50"])


def test_seed_000_every_number_matches_the_seed():
    text = seed("000")
    published = markdown_rows(text, "Step")
    tables = load_reference(TGI).tables
    assert len(published) == len(tables) == 5
    batch = None
    for cells, (_, row) in zip(published, tables.iterrows(), strict=True):
        step, size, *stats = cells
        batch = int(size) if size else batch  # blank: continues the row above
        assert (row["step"], row["batch_size"]) == (step, batch)
        for name, cell in zip(("average", "lowest", "highest", "p50", "p90", "p99"), stats, strict=False):
            value, unit = cell.split(" ", 1)
            assert row[name] == float(value) and row["unit"] == unit


def test_seed_000_in_batch_schema():
    ref = load_reference(TGI)
    assert list(ref.batch.columns) == list(S.BATCH_COLUMNS)
    row = ref.batch.iloc[0]
    assert row[S.BATCH_SIZE] == 16 and row[S.SEQUENCE_LENGTH] == 500 and row[S.DECODE_LENGTH] == 1000
    assert row[S.PREFILL_LATENCY_S] == pytest.approx(0.95880, rel=1e-12)
    assert row[S.DECODE_TOKEN_LATENCY_S] == pytest.approx(0.12188, rel=1e-12)
    assert row[S.DECODE_TOTAL_LATENCY_S] == pytest.approx(121.75835, rel=1e-12)
    assert row[S.DECODE_THROUGHPUT] == pytest.approx(131.28, rel=1e-12)
    # published as 16 / latency; our column counts the 500 prompt tokens of each of the 16 requests
    assert row[S.PREFILL_THROUGHPUT] == pytest.approx(16.69 * 500, rel=1e-12)
    assert row[S.PREFILL_THROUGHPUT] == pytest.approx(16 * 500 / row[S.PREFILL_LATENCY_S], rel=1e-3)
    assert row[S.DECODE_THROUGHPUT] == pytest.approx(16 * 999 / row[S.DECODE_TOTAL_LATENCY_S], rel=1e-4)
    assert pd.isna(row[S.REPEAT]) and not row[S.WARMUP]
    # the dtypes of a results folder's batch.parquet, so the two concatenate without surprises
    ours = empty("batch")
    assert pd.concat([ours, ref.batch]).dtypes[S.BATCH_SIZE] == ref.batch.dtypes[S.BATCH_SIZE] == "Int64"
    assert list(pd.concat([ours, ref.batch]).columns) == list(S.BATCH_COLUMNS)
    assert row[S.RUN_ID] == f"reference:{TGI}" and row[S.SCENARIO] == "batch" and row[S.BACKEND] == "tgi"
    assert row[S.MODEL_ID] == "bigscience/mt0-xxl-mt" and "seed 000" in row[S.CONFIG_LABEL]


def test_seed_000_batch_stats():
    assert reference.STAT == S.STAT == "stat"  # the schema's name, still importable from reference
    stats = load_reference(TGI).batch_stats.set_index(S.STAT)
    assert list(stats.index) == list(S.BATCH_STATS)
    assert stats.loc["lowest", S.PREFILL_LATENCY_S] == pytest.approx(0.9467)
    assert stats.loc["highest", S.PREFILL_THROUGHPUT] == pytest.approx(16.90 * 500)
    assert stats.loc["p90", S.PREFILL_LATENCY_S] == pytest.approx(0.9709)
    assert math.isnan(stats.loc["p50", S.DECODE_THROUGHPUT])  # the throughput table has no percentiles


def test_seed_000_deployment_and_experiment():
    text = seed("000")
    ref = load_reference(TGI)
    assert ref.launcher_config() == LauncherConfig.from_deployment_arguments(text)
    listed = dict(re.findall(r"^- (\w+): (.*)$", text, re.MULTILINE))
    assert list(ref.meta["deployment_arguments"]) == list(listed)
    experiment = {row[0]: row[1] for row in markdown_rows(text, "Parameter")}
    assert experiment["Model"] == ref.meta["experiment"]["model"] == ref.meta["model_id"]
    assert int(experiment["Sequence Length"]) == ref.meta["experiment"]["sequence_length"] == 500
    assert int(experiment["Decode Length"]) == ref.meta["experiment"]["decode_length"] == 1000
    assert int(experiment["N Runs"]) == ref.meta["experiment"]["n_runs"] == 10
    assert int(experiment["Warmups"]) == ref.meta["experiment"]["warmups"] == 1
    assert ref.meta["deployment_variables"]["CUDA_VISIBLE_DEVICES"]["value"] == list(range(8))
    assert ref.points.empty and list(ref.points.columns) == list(S.POINT_COLUMNS)


# -- seeds 001 and 003: happy_vllm model cards --------------------------------------------------------
@pytest.mark.parametrize(("name", "prefix", "ingestion", "speed", "kv", "model", "gpu"), [
    (CODELLAMA, "001", 13500, 41, 100_000, "CodeLlama-7b-Instruct-hf", "A100-80g"),
    (PHI3, "003", 15000, 18, 125_000, "Phi-3-vision-128k-instruct", "H100"),
])
def test_happy_vllm_main_metrics(name, prefix, ingestion, speed, kv, model, gpu):
    ref = load_reference(name)
    assert ref.metric("prompt_ingestion_speed") == ingestion
    assert ref.metric("generation_speed_per_request") == speed
    assert ref.metric("kv_cache_capacity") == kv
    assert ref.meta["model_id"] == model and ref.meta["hardware"]["gpu_name"] == gpu
    # the table as printed in the seed, cell for cell
    printed = [row[1] for row in markdown_rows(seed(prefix), "Metric")]
    assert printed == list(ref.main_metrics["printed_value"])
    assert [row[0] for row in markdown_rows(seed(prefix), "Metric")] == list(ref.main_metrics["printed_metric"])
    assert [float(re.sub(r"[^\d.]", "", p.split()[0].replace("k", "000"))) for p in printed] == [ingestion, speed, kv]
    with pytest.raises(KeyError, match="prompt_ingestion_speed"):
        ref.metric("goodput")


@pytest.mark.parametrize(("name", "commit", "ingestion", "speed", "kv", "gpu"), [
    (PHI3_A100, "9649d93", 20000, 54, 125_000, "A100-80g"),
    (PHI3_H100, "81b1eb3", 41500, 77, 150_000, "H100"),
])
def test_seed_003_reruns(name, commit, ingestion, speed, kv, gpu):
    ref = load_reference(name)
    assert [ref.metric(m) for m in ("prompt_ingestion_speed", "generation_speed_per_request", "kv_cache_capacity")] \
        == [ingestion, speed, kv]
    assert ref.meta["commit"].startswith(commit) and ref.meta["commit"] in ref.source
    assert ref.source.endswith(ref.meta["path"]) and ref.meta["path"].startswith(f"{gpu}/Phi-3/")
    assert ref.meta["hardware"]["gpu_name"] == ref.launch_parameters["gpu_name"] == gpu
    # the seed's launch parameters but for the run's date (and, on the A100, the relabelled GPU)
    seed_params = load_reference(PHI3).launch_parameters
    assert {k for k, v in ref.launch_parameters.items() if seed_params[k] != v} <= {"suite_id", "gpu_name"}
    assert ref.launcher_config() == load_reference(PHI3).launcher_config()
    assert ref.points.iloc[0][S.USERS] == 10


def test_seed_003_says_where_it_was_relabelled():
    notes = " ".join(load_reference(PHI3).meta["notes"])
    assert "631bf02" in notes and "9649d93" in notes and "debug mode" in notes


def test_happy_vllm_main_metrics_beside_ours():
    ours = main_metrics(Results())  # an empty run: the table's shape and the card's wording
    ref = load_reference(CODELLAMA)
    card = ref.card_metrics()
    assert list(card.columns) == list(ours.columns) == list(COLUMNS)
    assert card["metric"].tolist() == ours["metric"].tolist() == list(METRICS)
    # our row names are happy_vllm's, the generation speed's at the card's own point
    assert card["label"].tolist() == ours["label"].tolist()
    assert card["label"].iloc[0] == "Prompt ingestion speed"
    assert card["value"].tolist() == [13500.0, 41.0, 100000.0]
    assert card["text"].iloc[1] == "~41 t/s for each request" and card["point"].iloc[1] == "10 users, 1024/128 tokens"
    # our cells are formatted as the card prints its own
    assert [f"{approx(13500.0)} t/s", f"{approx(41.0)} t/s for each request", kv_text(100000.0)] == \
        card["text"].tolist()
    side = main_metrics_table(pd.concat([ours, card], ignore_index=True))
    assert side.columns.tolist() == ["default", ref.label]
    assert side.index.tolist() == card["label"].tolist()
    assert side[ref.label].tolist() == card["text"].tolist() and (side["default"] == "-").all()
    assert ref.main_metrics_table().equals(side[[ref.label]])
    assert load_reference(TGI).main_metrics_table().empty and load_reference(TGI).card_metrics().empty


@pytest.mark.parametrize("name", [CODELLAMA, PHI3])
def test_happy_vllm_point_in_points_schema(name):
    ref = load_reference(name)
    assert list(ref.points.columns) == list(S.POINT_COLUMNS)
    row = ref.points.iloc[0]
    assert (row[S.USERS], row[S.PROMPT_TOKENS], row[S.MAX_NEW_TOKENS]) == (10, 1024, 128)
    assert row[S.stat_column(S.SPEED_METRIC, "mean")] == ref.metric("generation_speed_per_request")
    assert row[S.KV_CAPACITY_TOKENS] == ref.metric("kv_cache_capacity")
    assert row[S.SCENARIO] == "concurrency" and row[S.BACKEND] == "vllm"
    assert pd.isna(row[S.stat_column("ttft", "p50")])  # not published: left empty, not guessed
    assert ref.batch.empty and list(ref.batch.columns) == list(S.BATCH_COLUMNS)


@pytest.mark.parametrize(("name", "prefix"), [(CODELLAMA, "001"), (PHI3, "003")])
def test_happy_vllm_launch_parameters(name, prefix):
    text = seed(prefix)
    ref = load_reference(name)
    assert ref.launch_parameters == parse_parameter_table(text)
    assert ref.launch_parameters["gpu_name"] == ref.meta["hardware"]["gpu_name"]
    assert ref.launch_parameters["vllm_version"] == ref.meta["versions"]["vllm"]
    assert ref.launcher_config() == from_vllm_table(text)[0]


def test_readme_documents_every_file():
    readme = (DATA / "README.md").read_text()
    for path in sorted((DATA / "reference").rglob("*.*")):
        assert path.name in readme, path
        if path.parent.name in readme:
            continue
        pytest.fail(f"{path.parent.name} not described in data/README.md")
    for name in list_references():
        meta = json.loads((DATA / "reference" / name / "meta.json").read_text())
        assert (ROOT.parent / meta["source"]).name in readme
        assert all((DATA / "reference" / name / f).is_file() for f in meta["files"].values())
