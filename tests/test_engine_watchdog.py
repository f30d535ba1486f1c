"""TGI_TOOLKIT_STALL_MS: a forward that runs past the threshold has its thread's stack logged while it runs."""

from __future__ import annotations

import threading
import time

import pytest

from tgi_toolkit.engine import watchdog
from tgi_toolkit.engine.watchdog import StallWatch, from_environment


def held_in_a_named_place(seconds: float) -> None:
    time.sleep(seconds)


def test_a_closed_watch_stops_its_thread():
    def watching() -> int:
        return sum(thread.name == "stall-watch" for thread in threading.enumerate())

    before = watching()
    watch = StallWatch(0.05)
    assert watching() == before + 1
    watch.close()
    assert watching() == before


def test_a_long_forward_is_logged_from_inside_it_and_a_short_one_not_at_all(caplog):
    watch = StallWatch(0.1)
    with caplog.at_level("WARNING", logger="tgi_toolkit.engine"):
        for _ in range(20):  # short forwards: none runs anywhere near 0.1 s
            watch.begin("decode of 1 rows, 1 tokens")
            watch.end()
        watch.begin("prefill of 2 rows, 512 tokens")
        held_in_a_named_place(0.6)
        watch.end()
        logged = [r.getMessage() for r in caplog.records]
        time.sleep(0.3)  # nothing runs now: nothing more is logged
    watch.close()
    assert caplog.records[len(logged):] == []
    # looked at every 0.05 s, logged at each 0.1 s the forward has run: about 5 lines (fewer on a busy machine, or
    # more if the sleep overran), never past the most a forward may log
    assert 1 <= len(logged) <= watchdog.MOST_PER_FORWARD and watch.logged == len(logged)
    assert all(m.startswith("A forward (prefill of 2 rows, 512 tokens) has run ") for m in logged)
    # the innermost frame first: the sleep's caller, then this test
    assert all(" its thread is in: test_engine_watchdog.py:" in m and " held_in_a_named_place <- " in m
               and "test_a_long_forward_is_logged" in m for m in logged)
    ran = [float(m.split(" has run ")[1].split(" ms")[0]) for m in logged]
    assert all(ms >= 100 for ms in ran) and ran == sorted(ran)


def test_one_forward_logs_at_most_its_share(caplog, monkeypatch):
    monkeypatch.setattr(watchdog, "MOST_PER_FORWARD", 2)
    watch = StallWatch(0.05)
    with caplog.at_level("WARNING", logger="tgi_toolkit.engine"):
        watch.begin("prefill of 1 rows, 8 tokens")
        held_in_a_named_place(0.5)
        watch.end()
    watch.close()
    assert 1 <= len(caplog.records) <= 2


def test_a_forward_in_another_thread_is_the_one_looked_at(caplog):
    watch = StallWatch(0.1)

    def compute() -> None:
        watch.begin("decode of 64 rows, 64 tokens")
        held_in_a_named_place(0.4)
        watch.end()

    with caplog.at_level("WARNING", logger="tgi_toolkit.engine"):
        thread = threading.Thread(target=compute)
        thread.start()
        thread.join()
    watch.close()
    assert caplog.records and all("held_in_a_named_place <- test_engine_watchdog.py:" in r.getMessage()
                                  and " compute <- " in r.getMessage() for r in caplog.records)


def test_the_variable_takes_positive_milliseconds_and_names_itself_otherwise(monkeypatch):
    monkeypatch.delenv("STALLS", raising=False)
    assert from_environment("STALLS") is None
    monkeypatch.setenv("STALLS", " ")
    assert from_environment("STALLS") is None
    monkeypatch.setenv("STALLS", "250")
    watch = from_environment("STALLS")
    assert watch.threshold_s == 0.25
    watch.close()
    for bad in ("abc", "0", "-5", "nan"):
        monkeypatch.setenv("STALLS", bad)
        with pytest.raises(ValueError, match=rf"STALLS: '{bad}' is not a number of milliseconds above 0"):
            from_environment("STALLS")


def test_the_engine_refuses_a_bad_value_before_it_loads_anything(monkeypatch):
    from tgi_toolkit.engine.serve import UnsupportedSetting, _stall_watch

    monkeypatch.setenv("TGI_TOOLKIT_STALL_MS", "soon")
    with pytest.raises(UnsupportedSetting, match="TGI_TOOLKIT_STALL_MS: 'soon' is not a number of milliseconds"):
        _stall_watch()
    monkeypatch.delenv("TGI_TOOLKIT_STALL_MS")
    assert _stall_watch() is None
