"""Server lifecycle on the tgi, tgi-docker and vllm backends, through stand-in executables on PATH.

The stand-ins (tests/standins/) log what the real programs log, serve /health, exit with their
codes, and start children the way the real ones do (TGI's shard in its own process group, the
container outside our process tree). Every test ends with no process left (autouse fixture).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator

import httpx
import psutil
import pytest

from tests.standins.fixtures import STANDINS, no_leftover_processes, standins, tagged_processes  # noqa: F401
from tgi_toolkit.config import ConfigError, LauncherConfig
from tgi_toolkit.server import Server, ServerError, free_port

pytestmark = pytest.mark.usefixtures("standins")

PROCESS_BACKENDS = ["tgi", "tgi-docker", "vllm"]
READY_LINE = {"tgi": "Connected", "tgi-docker": "Connected", "vllm": "Application startup complete"}
CRASH_LINE = {"tgi": "Error: ShardCannotStart", "tgi-docker": "Error: ShardCannotStart",
              "vllm": "Engine core initialization failed"}


def config(**fields) -> LauncherConfig:
    return LauncherConfig(model_id="org/standin-model", max_total_tokens=512, max_input_tokens=256, **fields)


def quiet(cfg: LauncherConfig | None = None, backend: str = "tgi", **kwargs) -> Server:
    kwargs.setdefault("startup_progress", False)
    kwargs.setdefault("health_timeout", 20)
    return Server(cfg if cfg is not None else config(), backend=backend, **kwargs)


@pytest.mark.parametrize("backend", PROCESS_BACKENDS)
def test_start_waits_for_health_reads_facts_and_stop_leaves_nothing(backend, tmp_path):
    lines: list[str] = []
    server = quiet(backend=backend, on_log=lines.append, log_path=tmp_path / "server.log")
    assert server.start() is server
    assert server.running and server.health()
    assert server.url == f"http://127.0.0.1:{server.port}"
    assert server.config.port == server.port
    assert httpx.get(server.url + "/health").status_code == 200
    info = server.info()
    assert info["model_id"] == "org/standin-model"
    assert info["max_total_tokens"] == 512
    if backend == "vllm":
        assert server.kv_capacity_tokens == 123456  # "GPU KV cache size: 123,456 tokens"
        assert server.facts["max_concurrency"] == pytest.approx(123456 / 512, abs=0.01)
        assert server.max_batch_total_tokens is None
    else:
        assert server.max_batch_total_tokens == 16000  # "Setting max batch total tokens to 16000"
        assert "Args {" in server.facts["args_line"]
    assert server.facts["ready"] is True
    # The server and what it started run now: launcher + shard; docker client + shim + container.
    family = [psutil.Process(server.pid), *psutil.Process(server.pid).children(recursive=True)]
    started = tagged_processes(os.environ["TGI_TOOLKIT_STANDIN_TAG"])
    assert len(started) >= {"tgi": 2, "tgi-docker": 3, "vllm": 1}[backend]

    began = time.monotonic()
    assert server.stop() == 0
    assert time.monotonic() - began < 5
    assert not server.running and not server.health()
    assert not [p for p in family + started if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert server.stop() == 0  # idempotent

    # One log, three views: the callback, the file, and logs().
    assert any(READY_LINE[backend] in line for line in lines)
    assert (tmp_path / "server.log").read_text().splitlines() == lines
    assert server.logs(None) == lines
    assert server.logs(3) == lines[-3:]


@pytest.mark.parametrize("backend", PROCESS_BACKENDS)
def test_crash_at_start_raises_with_exit_code_and_last_log_lines(backend):
    server = quiet(backend=backend, env={"TGI_TOOLKIT_STANDIN": "crash"})
    began = time.monotonic()
    with pytest.raises(ServerError) as caught:
        server.start()
    assert time.monotonic() - began < 10
    err = caught.value
    assert err.exit_code == 1
    assert 0 < len(err.log_tail) <= 30
    assert CRASH_LINE[backend] in err.log_tail[-1] or any(CRASH_LINE[backend] in line for line in err.log_tail)
    assert "exited during start-up" in str(err) and CRASH_LINE[backend] in str(err)
    assert err.log_path == server.log_path and err.log_path.exists()
    assert not server.running and server.returncode == 1


def test_error_carries_only_the_last_30_lines(tmp_path, monkeypatch):
    # A launcher that prints 100 numbered lines and exits 3.
    script = tmp_path / "bin" / "text-generation-launcher"
    script.parent.mkdir()
    script.write_text("#!/bin/sh\nfor i in $(seq 1 100); do echo line $i; done\nexit 3\n")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{script.parent}{os.pathsep}{os.environ['PATH']}")
    with pytest.raises(ServerError) as caught:
        quiet().start()
    assert caught.value.exit_code == 3
    assert caught.value.log_tail == [f"line {i}" for i in range(71, 101)]


@pytest.mark.parametrize("backend", PROCESS_BACKENDS)
def test_never_healthy_times_out_and_stops_the_process(backend):
    server = quiet(backend=backend, env={"TGI_TOOLKIT_STANDIN": "never-healthy"}, health_timeout=1.5)
    began = time.monotonic()
    with pytest.raises(ServerError) as caught:
        server.start()
    assert 1.5 <= time.monotonic() - began < 8
    message = str(caught.value)
    assert "not healthy after 1.5 s" in message
    assert "HTTP 503" in message or "ConnectError" in message
    assert caught.value.log_tail  # what it was doing when we gave up
    assert not server.running


@pytest.mark.parametrize("backend", PROCESS_BACKENDS)
def test_a_server_that_ignores_sigterm_is_killed_after_the_grace_period(backend):
    server = quiet(backend=backend, env={"TGI_TOOLKIT_STANDIN": "ignore-sigterm"}).start()
    began = time.monotonic()
    code = server.stop(grace=1.0)
    took = time.monotonic() - began
    assert 1.0 <= took < 6
    # SIGKILL: -9 for our child; the docker client reports the killed container as 137
    assert code == (137 if backend == "tgi-docker" else -signal.SIGKILL)
    assert any("ignores SIGTERM" in line for line in server.logs(None))
    # The TGI shard lives in its own process group, orphaned by the SIGKILL: the autouse fixture
    # checks that it was stopped too.


def test_orphans_of_a_dead_launcher_get_sigterm_at_once_not_after_the_grace_period():
    server = quiet().start()
    os.kill(server.pid, signal.SIGKILL)  # the launcher dies; its shard (own group) lives on
    assert server.wait(5) == -signal.SIGKILL
    began = time.monotonic()
    server.stop(grace=10)
    assert time.monotonic() - began < 5  # nobody else would tell the shard to stop: we did, at once
    assert any("shard stopped by SIGTERM" in line for line in server.logs(None))  # a clean stop, not a kill


def test_docker_container_is_stopped_even_when_the_client_was_killed():
    server = quiet(backend="tgi-docker").start()
    os.kill(server.pid, signal.SIGKILL)  # the `docker run` client dies; the container does not
    server.wait(5)
    time.sleep(0.3)
    assert server.health()  # still served by the container
    server.stop(grace=2)
    assert not server.health()


def test_docker_command_names_the_container_maps_the_port_and_keeps_the_token_by_name(monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_secret_value")
    server = quiet(backend="tgi-docker").start()
    try:
        command = server.command
        assert command[:2] == ["docker", "run"]
        assert f"127.0.0.1:{server.port}:80" in command
        assert command[command.index("--name") + 1].startswith(f"tgi-toolkit-{server.port}-")
        assert command[command.index("--gpus") + 1] == "all"
        assert "--rm" in command
        assert "hf_secret_value" not in " ".join(command)
        assert command[command.index("--hostname") + 1] == "0.0.0.0"  # inside the container
        assert command[command.index("--port") + 1] == "80"
    finally:
        server.stop()


@pytest.mark.parametrize("backend", ["tgi", "vllm"])
def test_gpu_visibility_passes_through_to_the_process(backend):
    with quiet(backend=backend, env={"CUDA_VISIBLE_DEVICES": "1,3"}) as server:
        assert any("CUDA_VISIBLE_DEVICES=1,3" in line for line in server.logs(None))


def test_vllm_gets_the_variables_its_mapping_asks_for():
    # --usage-stats off has no vLLM flag: it becomes VLLM_NO_USAGE_STATS=1 in the process's environment
    with quiet(config(usage_stats="off"), backend="vllm") as server:
        assert any("VLLM_NO_USAGE_STATS=1" in line for line in server.logs(None))


def test_vllm_runs_the_executable_tgi_toolkit_vllm_names_else_the_one_on_path(tmp_path, monkeypatch):
    # vLLM lives in a venv of its own (`make vllm`), off PATH: TGI_TOOLKIT_VLLM names its `vllm`.
    elsewhere = tmp_path / "venv" / "bin"
    elsewhere.mkdir(parents=True)
    (elsewhere / "vllm").write_text((STANDINS / "vllm").read_text().replace('$(dirname "$0")', str(STANDINS)))
    (elsewhere / "vllm").chmod(0o755)
    with quiet(backend="vllm", env={"TGI_TOOLKIT_VLLM": str(elsewhere / "vllm")}) as server:
        assert server.command[0] == str(elsewhere / "vllm") and server.command[1:3] == ["serve", "org/standin-model"]
        assert server.health()
    with quiet(backend="vllm") as server:  # unset: `vllm` on PATH, the stand-in
        assert server.command[0] == "vllm"
    monkeypatch.setenv("TGI_TOOLKIT_VLLM", str(tmp_path / "no-such-venv" / "bin" / "vllm"))
    with pytest.raises(ServerError, match="TGI_TOOLKIT_VLLM=.*no-such-venv.* is not an executable file"):
        quiet(backend="vllm").start()


def test_vllm_only_flags_come_from_tgi_toolkit_vllm_args_and_a_launcher_flag_there_is_refused():
    # --block-size and --num-gpu-blocks-override have no launcher field: appended as given, quotes honoured
    args = "--block-size 16 --num-gpu-blocks-override=40 --served-model-name 'a b'"
    with quiet(config(max_batch_size=4), backend="vllm", env={"TGI_TOOLKIT_VLLM_ARGS": args}) as server:
        command = server.command
        assert command[command.index("--block-size") + 1] == "16" and "--num-gpu-blocks-override=40" in command
        assert command[command.index("--served-model-name") + 1] == "a b"
        assert command[command.index("--max-num-seqs") + 1] == "4"
    # --max-num-seqs is max_batch_size's: two places for one setting are refused before anything starts
    refused = quiet(backend="vllm", env={"TGI_TOOLKIT_VLLM_ARGS": "--max-num-seqs 8"})
    with pytest.raises(ServerError, match="--max-num-seqs is the launcher's max_batch_size setting"):
        refused.start()
    assert refused.pid is None


def test_gpu_visibility_becomes_docker_gpus(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2")
    with quiet(backend="tgi-docker") as server:
        assert server.command[server.command.index("--gpus") + 1] == '"device=2"'
        # the NVIDIA runtime shows the container only that device
        assert any("NVIDIA_VISIBLE_DEVICES=2" in line for line in server.logs(None))
    # An empty CUDA_VISIBLE_DEVICES means no GPU: no --gpus, which a daemon without the NVIDIA
    # runtime accepts.
    monkeypatch.delenv("TGI_TOOLKIT_STANDIN_DOCKER_GPUS")
    with quiet(backend="tgi-docker", env={"CUDA_VISIBLE_DEVICES": ""}) as server:
        assert "--gpus" not in server.command


def test_docker_without_gpu_runtime_fails_with_the_daemon_message(monkeypatch):
    monkeypatch.delenv("TGI_TOOLKIT_STANDIN_DOCKER_GPUS")
    with pytest.raises(ServerError) as caught:
        quiet(backend="tgi-docker").start()
    assert caught.value.exit_code == 125
    assert "could not select device driver" in str(caught.value)


def test_free_port_is_picked_unless_one_is_set():
    # Two servers from the same default-port config run side by side: neither takes the default 3000.
    cfg = config()
    assert "port" not in cfg.model_fields_set
    with quiet(cfg) as first, quiet(cfg) as second:
        assert first.port != second.port
        assert first.health() and second.health()
    assert cfg.port == 3000  # the caller's config is not changed

    port = free_port()
    with quiet(config(port=port)) as server:
        assert server.port == port and server.url.endswith(f":{port}")
        # An explicit port that is taken is refused before anything starts.
        with pytest.raises(ServerError, match=f"port {port} on 127.0.0.1 is already in use"):
            quiet(config(port=port)).start()
        other = free_port()
        with quiet(config(port=port), port=other) as third:  # port= wins over config.port
            assert third.port == other


def test_launcher_variables_in_the_environment_do_not_override_the_config(monkeypatch):
    # TGI reads every flag from its environment variable when the flag is absent ($HOSTNAME is
    # the machine's name in many shells): the config alone must decide.
    monkeypatch.setenv("MAX_TOTAL_TOKENS", "7")
    monkeypatch.setenv("HOSTNAME", "some-box")
    monkeypatch.setenv("PORT", "1")
    with quiet() as server:
        assert server.info()["max_total_tokens"] == 512
        assert '"127.0.0.1"' in server.facts["args_line"]


def test_invalid_config_is_refused_before_any_process_starts():
    cfg = LauncherConfig(max_input_tokens=2048, max_total_tokens=1024)
    server = quiet(cfg)
    with pytest.raises(ConfigError) as caught:
        server.start()
    assert "max_input_tokens" in str(caught.value)
    assert server.pid is None


def test_missing_executable_is_named(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    for backend, exe in (("tgi", "text-generation-launcher"), ("vllm", "vllm"), ("tgi-docker", "docker")):
        with pytest.raises(ServerError, match=f"`{exe}` not found on PATH"):
            quiet(backend=backend).start()


def test_url_backend_attaches_and_never_stops_the_server():
    with quiet() as owner:
        attached = Server(url=owner.url, startup_progress=False)
        assert attached.backend == "url"
        assert attached.start() is attached and attached.running
        assert attached.info()["model_id"] == "org/standin-model"
        assert attached.pid is None and attached.logs() == []
        assert attached.stop() is None
        assert owner.health()
    with pytest.raises(ServerError, match="not healthy after 0.5 s"):
        Server(url=owner.url, health_timeout=0.5, startup_progress=False).start()


def test_context_manager_stops_on_error_and_progress_display_runs(capsys):
    with pytest.raises(RuntimeError), Server(config(), backend="tgi", health_timeout=20) as server:
        assert server.running
        raise RuntimeError("boom")
    assert not server.running and server.returncode == 0
    assert "starting tgi server" in capsys.readouterr().err


def test_startup_progress_off_a_terminal_prints_each_log_line_once(capsys, monkeypatch, tmp_path):
    # A slow start (several health polls): a redrawn progress line printed to a pipe repeated the
    # latest log line at every poll. stderr here is pytest's capture: not a terminal, no kernel.
    monkeypatch.setenv("TGI_TOOLKIT_STANDIN_DELAY", "1.5")
    with Server(config(), backend="tgi", health_timeout=20, log_path=tmp_path / "server.log") as server:
        started = server.seconds_to_healthy
        printed = capsys.readouterr().err.splitlines()
        server.info()  # what the server logs once healthy is its work, not start-up progress
    assert started > 1.5 and "\r" not in "".join(printed)
    assert printed[0] == f"starting tgi server at {server.url} (log: {tmp_path / 'server.log'})"
    assert printed[-1].startswith(f"tgi server healthy at {server.url} after ")
    echoed = [line.removeprefix("[tgi server] ") for line in printed[1:-1]]
    assert all(line.startswith("[tgi server] ") for line in printed[1:-1])
    log = server.logs(None)
    assert echoed == log[:len(echoed)]  # the log as it came, each line once, in order
    assert any("Setting max batch total tokens to 16000" in line for line in echoed)
    assert "[tgi server]" not in capsys.readouterr().err  # nothing after start-up, nor at stop


def test_startup_progress_on_a_terminal_is_one_redrawn_line(capsys, monkeypatch):
    import tgi_toolkit.server.server as server_module

    monkeypatch.setattr(server_module, "_redraws_in_place", lambda stream: True)
    with Server(config(), backend="tgi", health_timeout=20):
        pass
    err = capsys.readouterr().err
    assert "starting tgi server" in err and "[tgi server]" not in err and "healthy at" not in err


def test_only_a_terminal_or_a_notebook_kernel_redraws_in_place(tmp_path):
    import io

    from tgi_toolkit.progress import redraws_in_place

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    assert redraws_in_place(Terminal())
    assert not redraws_in_place(io.StringIO())  # a pipe or a file (no kernel in this process)
    with open(tmp_path / "err.log", "w") as file:
        assert not redraws_in_place(file)


def test_a_failing_log_callback_does_not_break_the_server():
    def explode(line: str) -> None:
        raise ValueError(line)

    with quiet(on_log=explode) as server:
        assert server.health()
        assert any("Connected" in line for line in server.logs())


def test_bad_arguments_name_the_allowed_values():
    with pytest.raises(ValueError, match="backend='triton' is not one of"):
        Server(backend="triton")
    with pytest.raises(ValueError, match="use backend='url'"):
        Server(backend="tgi", url="http://127.0.0.1:1")


def assert_server_gone(pid: int, url: str) -> None:
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    with pytest.raises(httpx.HTTPError):
        httpx.get(url + "/health", timeout=1)


@contextlib.contextmanager
def script_with_a_server(script: str) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """Runs `script`, which prints its server's pid and url first; after the block, that server is gone."""
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        pid, url = proc.stdout.readline().split()
        yield proc, url
    finally:
        proc.kill()
        proc.stdout.close()
    assert_server_gone(int(pid), url)


def test_interpreter_exit_stops_a_forgotten_server(tmp_path):
    script = textwrap.dedent("""
        from tgi_toolkit.config import LauncherConfig
        from tgi_toolkit.server import Server
        server = Server(LauncherConfig(model_id="m"), backend="tgi", startup_progress=False).start()
        print(server.pid, server.url, flush=True)
        # no stop(): the atexit safety net must do it
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    pid, url = done.stdout.split()
    assert_server_gone(int(pid), url)


def test_a_script_killed_with_sigterm_stops_its_server_and_still_dies_of_sigterm(tmp_path):
    # `kill`, `timeout` and CI cancellations send SIGTERM, whose default ends Python with no finally and no
    # atexit: a server in its own process group outlived the script (found when a killed
    # benchmarks/simulate_accuracy.py left its engine serving). The script must still end as SIGTERM ends it.
    script = textwrap.dedent("""
        import time
        from tgi_toolkit.config import LauncherConfig
        from tgi_toolkit.server import Server
        with Server(LauncherConfig(model_id="m"), backend="tgi", startup_progress=False) as server:
            print(server.pid, server.url, flush=True)
            time.sleep(60)
    """)
    with script_with_a_server(script) as (proc, url):
        assert httpx.get(url + "/health", timeout=5).status_code == 200
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == -signal.SIGTERM


def test_a_sigterm_that_lands_while_the_script_polls_its_server_still_stops_it_and_ends_the_script():
    # SIGTERM's handler stops the servers on the main thread, which may be inside Popen.wait holding the lock
    # that a plain wait() takes: the handler waited on itself and the script hung until SIGKILL. The window is
    # microseconds per poll; the script here makes it certain by raising SIGTERM inside Popen's polling call.
    script = textwrap.dedent("""
        import signal, subprocess
        from tgi_toolkit.config import LauncherConfig
        from tgi_toolkit.server import Server
        server = Server(LauncherConfig(model_id="m"), backend="tgi", startup_progress=False).start()
        print(server.pid, server.url, flush=True)
        poll, landed = subprocess.Popen._try_wait, []

        def sigterm_lands_while_polling(popen, flags):
            if not landed:
                landed.append(True)
                signal.raise_signal(signal.SIGTERM)
            return poll(popen, flags)

        subprocess.Popen._try_wait = sigterm_lands_while_polling
        server.wait(60)
        print("the wait ended without the signal", flush=True)
    """)
    with script_with_a_server(script) as (proc, _):
        assert proc.wait(timeout=60) == -signal.SIGTERM
        assert proc.stdout.read() == ""


def test_default_log_folder_cannot_shadow_the_package(tmp_path, monkeypatch):
    # A folder named tgi_toolkit in the temp dir became a namespace package for a server started there.
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    server = quiet(backend="tgi")
    try:
        server.start()
        assert server.log_path.is_relative_to(tmp_path)
        assert not (tmp_path / "tgi_toolkit").exists()
        assert not server.log_path.parent.name.isidentifier()
    finally:
        server.stop()
