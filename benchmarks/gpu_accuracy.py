"""How far the GPU roofline's predictions fall from published figures it was not fitted to.

    .venv/bin/python benchmarks/gpu_accuracy.py            # cross-validate, print, write gpu_fit.json
    .venv/bin/python benchmarks/gpu_accuracy.py --no-write # the same, data/reference/gpu_fit.json untouched

Leave-one-source-out over data/reference/gpu_figures.csv: every figure of one publication is predicted by the
simulator with the factors fitted to every other publication (tgi_toolkit.simulate.gpu_fit). Prints each
figure's predicted, published and ratio, the summary per regime and per server, the GPU-to-GPU pairs (one
source's figure on one card predicted from its figure on another by the datasheet ratio), then the fit over
every figure, which it writes with the corpus's hash and the cross-validated errors (what every prediction's
uncertainty reads). Exits non-zero when a target below is missed.

Targets (issue 24): >= 80 % of figures within ±30 %; median |error| <= 15 % overall; no regime's median above
25 %; pairs' median |error| <= 20 %; a 1,000-request simulation under 10 s.

The measured-kernel model (tgi_toolkit.costs.measured, issue 39) is judged beside it on every figure whose card
and server NVIDIA's operator database covers, corpus and test set: it is fitted to nothing (kernel times from the
database, host terms the server profiles' priors), so each of its predictions is held out; the roofline's
prediction of the same figure is printed next to it. Its targets: median |error| <= 15 % and >= 80 % within ±30 %
on both, no regime's median above 20 % on the corpus, a 10,000-request simulation under 10 s. `--targets measured`
makes only those decide the exit code (the roofline's, issue 24, are blocked).

Then the test set (data/reference/gpu_figures_heldout.csv, gathered after the model's design was frozen by
someone who never saw it, from sources the corpus does not use): each figure predicted once by the fit over the
whole corpus. Leave-one-source-out measures the fitted factors on unseen figures, but the design (which terms,
which server profiles) was chosen while looking at the corpus; the test set measures both.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TARGET_WITHIN_30 = 0.80
TARGET_MEDIAN = 0.15
TARGET_REGIME_MEDIAN = 0.25
TARGET_PAIRS_MEDIAN = 0.20
TARGET_SPEED_S = 10.0
# issue 39, the measured-kernel model on cards and servers the operator database covers: corpus and test set
TARGET_MEASURED_MEDIAN = 0.15
TARGET_MEASURED_REGIME = 0.20
TEST_FIGURES, TEST_MODELS = "gpu_figures_heldout.csv", "gpu_models_heldout.json"


def speed_check() -> float:
    """Seconds of wall time for 1,000 simulated requests of 32 users on an H100 roofline."""
    from tgi_toolkit.costs.roofline import roofline
    from tgi_toolkit.simulate.api import run_concurrency

    start = time.perf_counter()
    run_concurrency(roofline("H100", "codellama/CodeLlama-7b-Instruct-hf"), users=[32], prompt_tokens=512,
                    max_new_tokens=128, requests=1000, light=True)
    return time.perf_counter() - start


def measured_speed_check(requests: int = 10_000) -> float:
    """Seconds of wall time for `requests` simulated requests of 32 users, priced by the measured-kernel model."""
    from tgi_toolkit.costs.measured import gpu_cost_model
    from tgi_toolkit.simulate.api import run_concurrency

    cost = gpu_cost_model("H100", "codellama/CodeLlama-7b-Instruct-hf", cost_model="measured", server="vllm-v1")
    start = time.perf_counter()
    run_concurrency(cost, users=[32], prompt_tokens=512, max_new_tokens=128, requests=requests, light=True)
    return time.perf_counter() - start


def measured_check(figures: list, models: dict, roofline_rows: list[dict], title: str) -> dict:
    """Each figure whose card and server the operator database covers, predicted by the simulator with the
    measured-kernel model (no fit: its kernel times are the card's, its host terms the server profile's
    priors), beside the roofline's prediction of the same figure (`roofline_rows`, by id)."""
    from tgi_toolkit.costs.measured import MeasuredCostModel, covered
    from tgi_toolkit.simulate import gpu_fit as G
    from tgi_toolkit.simulate.figures import simulated

    roof = {r["id"]: r for r in roofline_rows}
    rows, sources = [], set()
    for f in figures:
        if not covered(f.gpu, f.server):
            continue
        cost = MeasuredCostModel(f.gpu, models[f.model_id], num_shard=f.num_gpus, dtype=f.dtype,
                                 quantize=f.quantize, server=f.server, server_version=f.server_version or None)
        if not cost.priced:
            continue
        rows.append({**G.figure_row(f, simulated(f, cost)), "provenance": cost.provenance()})
        sources.update(cost.priced.values())
    print(f"\n{title}: {len(rows)} figures on cards and servers the operator database covers, predicted by the "
          "measured-kernel model (nothing fitted), beside the roofline's prediction of the same figure:")
    print(f"  {'figure':48} {'regime':15} {'server':12} {'published':>10} {'measured':>9} {'roofline':>9}")
    for r in sorted(rows, key=lambda r: (r["regime"], r["id"])):
        print(f"  {r['id'][:48]:48} {r['regime']:15} {r['server']:12} {r['published']:10.4g} {r['ratio']:9.2f} "
              f"{roof[r['id']]['ratio']:9.2f}")
    same = [roof[r["id"]] for r in rows]
    out = {"figures": len(rows), "all": G.stats([G.error(r["ratio"]) for r in rows]),
           "by_regime": G.summarize(rows, "regime"), "by_server": G.summarize(rows, "server")}
    versus = {"all": G.stats([G.error(r["ratio"]) for r in same]), "by_regime": G.summarize(same, "regime"),
              "by_server": G.summarize(same, "server")}
    print(f"  {'':16} {'figures':>7} {'measured: median':>17} {'±30 %':>6}   {'roofline: median':>17} {'±30 %':>6}")
    for part in ("by_regime", "by_server"):
        for k, st in out[part].items():
            v = versus[part][k]
            print(f"  {k:16} {st['figures']:7d} {st['median_error']:17.1%} {st['within_30']:6.0%}   "
                  f"{v['median_error']:17.1%} {v['within_30']:6.0%}")
    a, v = out["all"], versus["all"]
    print(f"  {'all':16} {a['figures']:7d} {a['median_error']:17.1%} {a['within_30']:6.0%}   "
          f"{v['median_error']:17.1%} {v['within_30']:6.0%}")
    print("  tables read: " + "; ".join(sorted(sources)))
    out["roofline_same_figures"] = versus
    return out


def heldout_test(fitted: dict) -> tuple[dict, list[dict]]:
    """The test set predicted once with the fit over the whole corpus: per figure, per regime, overall."""
    from tgi_toolkit.simulate import gpu_fit as G
    from tgi_toolkit.simulate.corpus import corpus_dir, load_figures, load_models, models_file

    figures = load_figures(corpus_dir() / TEST_FIGURES)
    models = {**load_models(), **load_models(models_file(TEST_MODELS))}
    rows = [G.figure_row(f, G.predict(f, models, fitted)) for f in figures]
    print(f"\nTest set ({TEST_FIGURES}: {len(figures)} figures from {len({f.source_id for f in figures})} sources "
          "the design never saw), predicted once by the fit over the whole corpus:")
    for r in sorted(rows, key=lambda r: (r["regime"], r["id"])):
        print(f"  {r['id'][:50]:50} {r['regime']:15} {r['server']:12} {r['metric']:22} {r['predicted']:10.4g} "
              f"{r['published']:10.4g} {r['ratio']:6.2f}")
    overall = G.stats([G.error(r["ratio"]) for r in rows])
    by_regime = G.summarize(rows, "regime")
    for k, st in {**by_regime, "all": overall}.items():
        print(f"  {k:16} {st['figures']:3d} figures, median |error| {st['median_error']:.1%}, "
              f"p80 {st['p80_error']:.1%}, within ±30 %: {st['within_30']:.0%}")
    return {"figures": len(figures), "all": overall, "by_regime": by_regime}, rows


def main(argv: list[str] | None = None) -> int:
    from tgi_toolkit.costs.uncertainty import FIT_FILE
    from tgi_toolkit.simulate import gpu_fit as G
    from tgi_toolkit.simulate.corpus import FIGURES_FILE, corpus_dir, corpus_sha256, load_figures, load_models

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--no-write", action="store_true", help=f"do not write data/reference/{FIT_FILE}")
    ap.add_argument("--targets", choices=("all", "measured"), default="all",
                    help="which targets decide the exit code (the roofline's, issue 24, are blocked)")
    args = ap.parse_args(argv)

    figures, models = load_figures(), load_models()
    sources = {f.source_id for f in figures}
    print(f"{FIGURES_FILE}: {len(figures)} figures from {len(sources)} sources, "
          f"{len({f.gpu for f in figures})} GPU kinds, servers {sorted({f.server for f in figures})}")
    rows, folds = G.cross_validate(figures, models, progress=lambda m: print(m, flush=True))

    print(f"\n{'figure':48} {'regime':15} {'server':12} {'metric':22} {'predicted':>10} {'published':>10} {'ratio':>6}")
    for r in sorted(rows, key=lambda r: (r["regime"], r["id"])):
        print(f"{r['id'][:48]:48} {r['regime']:15} {r['server']:12} {r['metric']:22} {r['predicted']:10.4g} "
              f"{r['published']:10.4g} {r['ratio']:6.2f}")
    overall = G.stats([G.error(r["ratio"]) for r in rows])
    by_regime, by_server = G.summarize(rows, "regime"), G.summarize(rows, "server")

    def show(title: str, table: dict) -> None:
        print(f"\n{title:16} {'figures':>7} {'median':>7} {'p80':>7} {'±30 %':>6}")
        for k, s in table.items():
            print(f"{k:16} {s['figures']:7d} {s['median_error']:7.1%} {s['p80_error']:7.1%} {s['within_30']:6.0%}")

    print("\nLeave-one-source-out (each figure predicted by a fit that never saw its publication):")
    show("regime", by_regime)
    show("server", by_server)
    show("all", {"all": overall})

    pair_rows = G.pairs(figures, models, folds)
    print(f"\nGPU to GPU within a source ({len(pair_rows)} directed pairs, predicted from the other card's "
          "published figure by the held-out fit's ratio):")
    for p in pair_rows:
        print(f"  {p['from_gpu']:>10} -> {p['to_gpu']:10} {p['metric']:22} {p['predicted']:10.4g} "
              f"{p['published']:10.4g} {p['ratio']:6.2f}  ({p['to']})")
    pair_median = statistics.median([G.error(p["ratio"]) for p in pair_rows]) if pair_rows else float("nan")
    if pair_rows:
        print(f"  median |error| {pair_median:.1%}")

    full = G.fit(figures, models)
    print("\nThe fit over every figure (what predictions use):")
    for name, value in full["factors"].items():
        print(f"  {name:32} {value:.4g}")
    for server, terms in full["servers"].items():
        print(f"  {server:12} " + ", ".join(f"{k} {v * 1e6:.1f} us" for k, v in terms.items()))
    test, test_rows = heldout_test(full)
    seconds = speed_check()
    print(f"\n1,000 simulated requests (32 users): {seconds:.2f} s")

    from tgi_toolkit.simulate.corpus import models_file

    corpus_m = measured_check(figures, models, rows, "Measured-kernel model over the corpus")
    test_m = measured_check(load_figures(corpus_dir() / TEST_FIGURES),
                            {**models, **load_models(models_file(TEST_MODELS))}, test_rows,
                            "Measured-kernel model over the test set")
    measured_seconds = measured_speed_check()
    print(f"\n10,000 simulated requests (32 users), measured-kernel model: {measured_seconds:.2f} s")

    if not args.no_write:
        out = corpus_dir() / FIT_FILE
        fit = {"written_by": "benchmarks/gpu_accuracy.py", "date": dt.date.today().isoformat(),
               "corpus_sha256": corpus_sha256(), "figures": len(figures), "sources": len(sources), **full,
               "coverage": G.coverage(figures, models),
               "cross_validated": {"method": "leave one source out, predicted by the simulator",
                                   "all": overall, "by_regime": by_regime, "by_server": by_server,
                                   "pairs": {"count": len(pair_rows), "median_error": pair_median}},
               "test_set": test,
               "measured": {"method": "the measured-kernel model (tgi_toolkit.costs.measured): kernel times from "
                                      "NVIDIA's operator database, host terms the server profiles' priors; nothing "
                                      "fitted, so every figure it prices is held out",
                            "cross_validated": corpus_m, "test_set": test_m}}
        out.write_text(json.dumps(fit, indent=2) + "\n")
        print(f"wrote {out}")

    misses = []
    if overall["within_30"] < TARGET_WITHIN_30:
        misses.append(f"{overall['within_30']:.0%} of figures within ±30 % (target {TARGET_WITHIN_30:.0%})")
    if overall["median_error"] > TARGET_MEDIAN:
        misses.append(f"median |error| {overall['median_error']:.1%} (target {TARGET_MEDIAN:.0%})")
    misses += [f"{k}: median {s['median_error']:.1%} (target {TARGET_REGIME_MEDIAN:.0%})"
               for k, s in by_regime.items() if s["median_error"] > TARGET_REGIME_MEDIAN]
    if pair_rows and pair_median > TARGET_PAIRS_MEDIAN:
        misses.append(f"pairs: median {pair_median:.1%} (target {TARGET_PAIRS_MEDIAN:.0%})")
    if seconds > TARGET_SPEED_S:
        misses.append(f"1,000 requests took {seconds:.1f} s (target {TARGET_SPEED_S:.0f} s)")
    print("\nroofline targets (issue 24): " + ("all met" if not misses else "MISSED: " + "; ".join(misses)))
    measured_misses = []
    a = corpus_m["all"]
    if a["median_error"] > TARGET_MEASURED_MEDIAN:
        measured_misses.append(f"corpus median |error| {a['median_error']:.1%} (target {TARGET_MEASURED_MEDIAN:.0%})")
    if a["within_30"] < TARGET_WITHIN_30:
        measured_misses.append(f"corpus {a['within_30']:.0%} within ±30 % (target {TARGET_WITHIN_30:.0%})")
    measured_misses += [f"corpus {k}: median {st['median_error']:.1%} (target {TARGET_MEASURED_REGIME:.0%})"
                        for k, st in corpus_m["by_regime"].items() if st["median_error"] > TARGET_MEASURED_REGIME]
    t = test_m["all"]
    if t["median_error"] > TARGET_MEASURED_MEDIAN:
        measured_misses.append(f"test set median |error| {t['median_error']:.1%} (target {TARGET_MEASURED_MEDIAN:.0%})")
    if t["within_30"] < TARGET_WITHIN_30:
        measured_misses.append(f"test set {t['within_30']:.0%} within ±30 % (target {TARGET_WITHIN_30:.0%})")
    if measured_seconds > TARGET_SPEED_S:
        measured_misses.append(f"10,000 requests took {measured_seconds:.1f} s (target {TARGET_SPEED_S:.0f} s)")
    print("measured-kernel targets (issue 39): " + ("all met" if not measured_misses
                                                   else "MISSED: " + "; ".join(measured_misses)))
    if args.targets == "measured":
        return 1 if measured_misses else 0
    return 1 if misses or measured_misses else 0


if __name__ == "__main__":
    sys.exit(main())
