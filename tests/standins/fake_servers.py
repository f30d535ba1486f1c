"""Stand-ins for `text-generation-launcher`, `vllm` and `docker`: the parts the toolkit talks to.

Each behaves like the real program as the toolkit sees it: the same log lines (TGI's `Args { ... }`,
"Setting max batch total tokens to N", the router's `Connected`; vLLM's "GPU KV cache size: N tokens"
and uvicorn's start-up lines), a `/health` route, `/info`, `/v1/models`, exit codes, and child
processes in their own process groups (TGI's shards) or outside the caller's tree (docker
containers). Standard library only.

The variant comes from TGI_TOOLKIT_STANDIN:
  ok              start, become healthy, stop cleanly on SIGTERM (the default)
  crash           exit 1 during start-up after logging a traceback
  never-healthy   serve, but /health answers 503 forever
  ignore-sigterm  become healthy, then ignore SIGTERM (only SIGKILL ends it)
TGI_TOOLKIT_STANDIN_DELAY: seconds of simulated model loading (default 0.3).

`fake_servers.py openai --port N [--itl SECONDS] [--max-model-len N]` is a mock OpenAI-style server
(as guidellm's mock server: /v1/completions and /v1/chat/completions streamed, /tokenize, no
/metrics), for the harness against servers it did not expect. Its TGI_TOOLKIT_STANDIN is a
comma-separated list of behaviours (default none: a well-behaved server):
  tokenize-400   /tokenize answers 400 to everything
  own-count      counts prompt tokens its own way: usage.prompt_tokens is the /tokenize count + 3
  empty-final    the finish reason comes in a last chunk of its own, with empty text
  stop-at-max    says finish_reason "stop" when it stops at max_tokens
  malformed      every third request (the 2nd, 5th, ...) gets a cut JSON event mid-stream
  drop           every third request loses its connection after two tokens
  http-500       every third request is answered 500
  flood          each token event is heavy to parse (a large logprobs object), written with no pause
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

VARIANT = os.environ.get("TGI_TOOLKIT_STANDIN", "ok")
DELAY = float(os.environ.get("TGI_TOOLKIT_STANDIN_DELAY", "0.3"))


def say(line: str) -> None:
    try:
        print(line, flush=True)
    except (BrokenPipeError, OSError):
        pass  # the reader went away (a killed `docker run` client); keep serving like a container


def parse_flags(argv: list[str]) -> dict[str, str | bool]:
    """`--a-b 1 --flag --c=2` -> {"a_b": "1", "flag": True, "c": "2"}."""
    out: dict[str, str | bool] = {}
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg.startswith("--"):
            name, eq, value = arg[2:].partition("=")
            key = name.replace("-", "_")
            if eq:
                out[key] = value
            elif i + 1 < len(argv) and not argv[i + 1].startswith("--"):
                out[key] = argv[i + 1]
                i += 1
            else:
                out[key] = True
        i += 1
    return out


class Health:
    ready = False


def make_handler(info: dict, models: dict | None) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:  # keep the log to the server's own lines
            pass

        def send_json(self, status: int, body: object) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path == "/health":
                if Health.ready and VARIANT != "never-healthy":
                    self.send_response(200)  # both answer 200 with an empty body
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                else:
                    self.send_json(503, {"error": "unhealthy", "error_type": "healthcheck"})
            elif self.path == "/info" and models is None:
                self.send_json(200, info)
            elif self.path == "/v1/models":
                self.send_json(200, models or {"object": "list", "data": [{"id": info["model_id"],
                                                                          "object": "model"}]})
            elif self.path == "/version" and models is not None:
                self.send_json(200, {"version": "0.0.0-standin"})
            else:
                self.send_json(404, {"error": "not found"})

    return Handler


def serve_http(host: str, port: int, info: dict, models: dict | None = None) -> ThreadingHTTPServer:
    httpd = ThreadingHTTPServer((host, port), make_handler(info, models))
    threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True).start()
    return httpd


def install_sigterm(ignore_line: str) -> list[int]:
    """SIGTERM and SIGINT append to the list returned (an ignore-sigterm stand-in says `ignore_line` instead).

    The handler only appends: one that took a lock (`Event.set`) waited forever when the signal landed while
    the main thread held that same lock inside `Event.wait`, and a stand-in hung so outlived its parent in CI.
    """
    received: list[int] = []

    def handler(signum: int, frame: object) -> None:
        if VARIANT == "ignore-sigterm":
            say(ignore_line)
            return
        received.append(signum)

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
    return received


def wait_for(received: list[int]) -> None:
    while not received:
        time.sleep(0.1)


def visible_devices_line() -> str:
    names = ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "VLLM_NO_USAGE_STATS")
    return "standin: " + " ".join(f"{name}={os.environ.get(name, '<unset>')}" for name in names)


# ---------------------------------------------------------------- text-generation-launcher


def tgi_stamp() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def tgi_log(target: str, message: str, level: str = "INFO") -> None:
    say(f"{tgi_stamp()} {level:>5} {target}: {message}")


def rust_debug(value: object) -> str:
    if value is None:
        return "None"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)) or str(value).isdigit():
        return str(value)
    return json.dumps(str(value))


def tgi(argv: list[str]) -> int:
    if "--version" in argv:
        say("text-generation-launcher 3.3.6-dev0")
        return 0
    flags = parse_flags(argv)

    def get(name: str, default: object = None) -> object:
        return flags.get(name, os.environ.get(name.upper(), default))

    model_id = str(get("model_id", "bigscience/bloom-560m"))
    port = int(get("port", 3000))
    hostname = str(flags.get("hostname", "0.0.0.0"))  # the real one reads $HOSTNAME too; not copied here
    max_total = int(get("max_total_tokens", 4096))
    max_input = int(get("max_input_tokens", get("max_input_length", max_total - 1)))
    batch_total = get("max_batch_total_tokens")
    quantize = get("quantize")
    args = [
        ("model_id", model_id), ("revision", get("revision")),
        ("validation_workers", int(get("validation_workers", 2))),
        ("sharded", get("sharded")), ("num_shard", get("num_shard")),
        ("quantize", f"Some( {str(quantize).capitalize()}, )" if quantize else None),
        ("dtype", get("dtype")), ("max_concurrent_requests", int(get("max_concurrent_requests", 128))),
        ("max_input_tokens", get("max_input_tokens")), ("max_total_tokens", get("max_total_tokens")),
        ("max_batch_prefill_tokens", get("max_batch_prefill_tokens")),
        ("max_batch_total_tokens", batch_total), ("max_batch_size", get("max_batch_size")),
        ("hostname", hostname), ("port", port), ("cuda_memory_fraction", float(get("cuda_memory_fraction", 1.0))),
    ]
    rendered = ", ".join(f"{k}: {v if k == 'quantize' and v else rust_debug(v)}" for k, v in args)
    tgi_log("text_generation_launcher", f"Args {{ {rendered}, }}")
    say(visible_devices_line())
    if max_input >= max_total:
        say(f'Error: ArgumentValidation("`max_input_tokens` must be < `max_total_tokens`. '
            f'Given: {max_input} and {max_total}")')
        return 1

    tgi_log("download: text_generation_launcher", "Starting check and download process for model")
    tgi_log("download: text_generation_launcher", f"Successfully downloaded weights for {model_id}")
    tgi_log("shard-manager: text_generation_launcher", "Starting shard rank=0")
    # TGI runs each shard in its own process group (so a Ctrl-C in the terminal does not reach it).
    shard = subprocess.Popen([sys.executable, __file__, "shard"], start_new_session=True)
    time.sleep(DELAY)
    if VARIANT == "crash":
        say("Traceback (most recent call last):")
        say('  File "/opt/conda/bin/text-generation-server", line 8, in <module>')
        say("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB")
        tgi_log("text_generation_launcher", "Shard 0 failed to start", "ERROR")
        shard.terminate()
        shard.wait()
        tgi_log("text_generation_launcher", "Shutting down shards")
        say("Error: ShardCannotStart")
        return 1
    tgi_log("shard-manager: text_generation_launcher", "Shard ready in 0.3s rank=0")
    tgi_log("text_generation_launcher", "Starting Webserver")
    tgi_log("text_generation_router_v3: backends/v3/src/lib.rs:125", "Warming up model")
    total = int(batch_total) if batch_total else 16000
    tgi_log("text_generation_router_v3: backends/v3/src/lib.rs:137", f"Setting max batch total tokens to {total}")
    info = {"model_id": model_id, "model_sha": None, "model_pipeline_tag": "text-generation",
            "max_concurrent_requests": int(get("max_concurrent_requests", 128)), "max_best_of": 2,
            "max_stop_sequences": 4, "max_input_tokens": max_input, "max_total_tokens": max_total,
            "validation_workers": 2, "max_client_batch_size": 4, "router": "text-generation-router",
            "version": "3.3.6-dev0", "sha": None, "docker_label": None}
    stop = install_sigterm(f"{tgi_stamp()}  INFO text_generation_launcher: standin ignores SIGTERM")
    # In a stand-in container the host side of `-p` is what a client reaches.
    bind_port = int(os.environ.get("STANDIN_BIND_PORT", port))
    httpd = serve_http("127.0.0.1" if hostname == "0.0.0.0" else hostname, bind_port, info)
    Health.ready = True
    tgi_log("text_generation_router::server: router/src/server.rs:2302", "Connected")
    wait_for(stop)
    tgi_log("text_generation_launcher", "Terminating webserver")
    tgi_log("text_generation_launcher", "Waiting for webserver to gracefully shutdown")
    httpd.shutdown()
    tgi_log("text_generation_launcher", "webserver terminated")
    tgi_log("text_generation_launcher", "Shutting down shards")
    shard.terminate()
    shard.wait()
    return 0


def shard() -> int:
    # A model shard: waits to be told to stop, and says so (tests tell a SIGTERM from a SIGKILL).
    def on_term(signum: int, frame: object) -> None:
        say(f"{tgi_stamp()}  INFO shard-manager: text_generation_launcher: shard stopped by SIGTERM rank=0")
        sys.exit(0)

    signal.signal(signal.SIGTERM, on_term)
    while True:
        time.sleep(1)


# ---------------------------------------------------------------- vllm


def vllm_stamp() -> str:
    return _dt.datetime.now().strftime("%m-%d %H:%M:%S")


def vllm_log(source: str, message: str, level: str = "INFO") -> None:
    say(f"{level} {vllm_stamp()} [{source}] {message}")


def vllm(argv: list[str]) -> int:
    if argv[:1] == ["--version"]:
        say("0.11.0")
        return 0
    if argv[:1] != ["serve"] or len(argv) < 2 or argv[1].startswith("-"):
        say("usage: vllm serve [model_tag] [options]")
        return 2
    model = argv[1]
    flags = parse_flags(argv[2:])
    host = str(flags.get("host", "0.0.0.0"))
    port = int(flags.get("port", 8000))
    max_len = int(flags.get("max_model_len", 4096))
    vllm_log("api_server.py:1805", "vLLM API server version 0.11.0")
    vllm_log("utils.py:326", f"non-default args: {{'model': {model!r}, 'port': {port}}}")
    say(visible_devices_line())
    time.sleep(DELAY)
    if VARIANT == "crash":
        vllm_log("core.py:708", "EngineCore failed to start.", "ERROR")
        say("Traceback (most recent call last):")
        say("ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` "
            "when initializing the engine.")
        say("RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}")
        return 1
    kv_tokens = 123456
    vllm_log("gpu_worker.py:276", "Available KV cache memory: 4.50 GiB")
    vllm_log("kv_cache_utils.py:849", f"GPU KV cache size: {kv_tokens:,} tokens")
    vllm_log("kv_cache_utils.py:853", f"Maximum concurrency for {max_len:,} tokens per request: "
                                      f"{kv_tokens / max_len:.2f}x")
    stop = install_sigterm("INFO:     standin ignores SIGTERM")
    models = {"object": "list", "data": [{"id": model, "object": "model", "owned_by": "vllm", "root": model,
                                          "max_model_len": max_len}]}
    httpd = serve_http("127.0.0.1" if host == "0.0.0.0" else host, port, {"model_id": model}, models)
    vllm_log("api_server.py:1857", f"Starting vLLM API server 0 on http://{host}:{port}")
    say(f"INFO:     Started server process [{os.getpid()}]")
    say("INFO:     Waiting for application startup.")
    Health.ready = True
    say("INFO:     Application startup complete.")
    say(f"INFO:     Uvicorn running on http://{host}:{port} (Press CTRL+C to quit)")
    wait_for(stop)
    say("INFO:     Shutting down")
    httpd.shutdown()
    say("INFO:     Application shutdown complete.")
    return 0


# ---------------------------------------------------------------- a mock OpenAI server


def openai_server(argv: list[str]) -> int:
    flags = parse_flags(argv)
    port, itl = int(flags.get("port", 8000)), float(flags.get("itl", 0.002))
    model, max_len = str(flags.get("model", "mock-model")), int(flags.get("max_model_len", 100000))
    behaviours = {b.strip() for b in VARIANT.split(",")} - {"ok", ""}
    counter = [0]
    lock = threading.Lock()
    # one heavy event, built once: the client parses it in full, the server only writes bytes
    heavy = {"text": "x", "index": 0, "finish_reason": None,
             "logprobs": {"tokens": ["x"] * 40, "token_logprobs": [-0.5] * 40,
                          "top_logprobs": [{f"t{i}": -1.0 * i for i in range(8)} for _ in range(40)]}}
    flood_event = json.dumps({"id": "c", "object": "text_completion", "choices": [heavy]}).encode()
    flood_event = b"data: " + flood_event + b"\n\n"

    def tokens_of(text: str) -> list[tuple[int, int]]:
        # a word (with the spaces before it) is a token: [start, stop) offsets
        out, i = [], 0
        while i < len(text):
            j = i
            while j < len(text) and text[j].isspace():
                j += 1
            while j < len(text) and not text[j].isspace():
                j += 1
            out.append((i, j))
            i = j
        return out

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def send_json(self, status: int, body: object) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path == "/health":
                self.send_json(200, {})
            elif self.path == "/v1/models":
                self.send_json(200, {"object": "list", "data": [{"id": model, "object": "model", "root": model,
                                                                 "max_model_len": max_len}]})
            else:
                self.send_json(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
            if self.path == "/tokenize":
                if "tokenize-400" in behaviours:
                    self.send_json(400, {"error": "Input validation error: unknown field", "error_type": "validation"})
                elif "inputs" in body:  # TGI's request: its answer has offsets
                    self.send_json(200, [{"id": k, "text": body["inputs"][a:b], "start": a, "stop": b}
                                         for k, (a, b) in enumerate(tokens_of(body["inputs"]))])
                else:
                    self.send_json(200, {"count": len(tokens_of(body.get("prompt", "")))})
                return
            if self.path not in ("/v1/completions", "/v1/chat/completions"):
                self.send_json(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
                return
            with lock:
                counter[0] += 1
                odd = counter[0] % 3 == 2
            if "http-500" in behaviours and odd:
                self.send_json(500, {"error": {"message": "mock failure", "type": "internal_error"}})
                return
            chat = self.path.endswith("chat/completions")
            prompt = body["messages"][-1]["content"] if chat else body.get("prompt", "")
            prompt_tokens = len(tokens_of(prompt)) + (3 if "own-count" in behaviours else 0)
            n = int(body.get("max_tokens") or 16)
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()

            def event(choice: dict, usage: dict | None = None) -> bytes:
                payload = {"id": "c", "object": "chat.completion.chunk" if chat else "text_completion",
                           "model": model, "choices": [choice] if choice else []}
                if usage is not None:
                    payload["usage"] = usage
                return b"data: " + json.dumps(payload).encode() + b"\n\n"

            def token(text: str, finish: str | None) -> dict:
                if chat:
                    return {"index": 0, "delta": {"content": text}, "finish_reason": finish}
                return {"index": 0, "text": text, "finish_reason": finish}

            last = "stop" if "stop-at-max" in behaviours else "length"
            try:
                if "flood" in behaviours:
                    for start in range(0, n, 200):
                        self.wfile.write(flood_event * min(200, n - start))
                else:
                    for i in range(n):
                        if "malformed" in behaviours and odd and i == 1:
                            self.wfile.write(b'data: {"choices": [{"index": 0, "text": "cut\n\n')
                        if "drop" in behaviours and odd and i == 2:
                            self.wfile.flush()
                            self.connection.shutdown(2)
                            return
                        finish = last if i == n - 1 and "empty-final" not in behaviours else None
                        self.wfile.write(event(token(f" w{i}", finish)))
                        self.wfile.flush()
                        time.sleep(itl)
                    if "empty-final" in behaviours:
                        self.wfile.write(event(token("", last)))
                if (body.get("stream_options") or {}).get("include_usage"):
                    self.wfile.write(event({}, {"prompt_tokens": prompt_tokens, "completion_tokens": n,
                                                "total_tokens": prompt_tokens + n}))
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()
            except OSError:
                pass  # the client went away

    httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    httpd.daemon_threads = True
    stop = install_sigterm("mock: ignores SIGTERM")
    threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True).start()
    say(f"mock OpenAI server on http://127.0.0.1:{port} behaviours={sorted(behaviours)}")
    wait_for(stop)
    httpd.shutdown()
    return 0


# ---------------------------------------------------------------- docker


def docker_state() -> Path:
    state = Path(os.environ.get("TGI_TOOLKIT_STANDIN_DOCKER_STATE", f"/tmp/standin-docker-{os.getuid()}"))
    state.mkdir(parents=True, exist_ok=True)
    return state


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is not alive
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def container_members(name: str) -> list[int]:
    """Processes of the stand-in container `name` (they carry STANDIN_CONTAINER=name)."""
    marker = f"STANDIN_CONTAINER={name}".encode()
    members = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/environ", "rb") as f:
                    if marker in f.read().split(b"\0"):
                        members.append(int(entry))
            except OSError:
                pass
    return members


def docker(argv: list[str]) -> int:
    if not argv:
        say("Usage:  docker [OPTIONS] COMMAND")
        return 0
    command, rest = argv[0], argv[1:]
    if command == "run":
        return docker_run(rest)
    if command in ("stop", "kill", "rm"):
        timeout, names, i = 10.0, [], 0
        while i < len(rest):
            if rest[i] in ("-t", "--time", "--timeout"):
                timeout = float(rest[i + 1])
                i += 2
                continue
            if not rest[i].startswith("-"):
                names.append(rest[i])
            i += 1
        code = 0
        for name in names:
            pid_file = docker_state() / f"{name}.pid"
            if not pid_file.exists():
                print(f"Error response from daemon: No such container: {name}", file=sys.stderr)
                code = 1
                continue
            pid = int(pid_file.read_text())
            if command == "stop" and pid_alive(pid):
                os.kill(pid, signal.SIGTERM)
                deadline = time.monotonic() + timeout
                while pid_alive(pid) and time.monotonic() < deadline:
                    time.sleep(0.05)
            # Killing a container's PID 1 ends every process in its PID namespace.
            for member in [pid, *container_members(name)]:
                if pid_alive(member):
                    os.kill(member, signal.SIGKILL)
            while pid_alive(pid):
                time.sleep(0.02)
            say(name)
        return code
    print(f"docker: '{command}' is not a docker command (stand-in).", file=sys.stderr)
    return 1


def docker_run(argv: list[str]) -> int:
    name, ports, env, gpus = None, [], {}, None
    takes_value = {"--name", "-p", "--publish", "-e", "--env", "-v", "--volume", "--gpus", "--shm-size",
                   "--ipc", "--network", "--entrypoint", "-w", "--workdir", "--user", "-u"}
    i = 0
    while i < len(argv) and argv[i].startswith("-"):
        flag, eq, inline = argv[i].partition("=")
        if flag in takes_value:
            value = inline if eq else argv[i + 1]
            i += 1 if eq else 2
            if flag == "--name":
                name = value
            elif flag in ("-p", "--publish"):
                ports.append(value)
            elif flag in ("-e", "--env"):
                key, has, val = value.partition("=")
                if has:
                    env[key] = val
                elif key in os.environ:  # `-e NAME` passes the caller's value by name
                    env[key] = os.environ[key]
            elif flag == "--gpus":
                gpus = value
        else:
            i += 1
    if i >= len(argv):
        print('docker: "docker run" requires at least 1 argument.', file=sys.stderr)
        return 125
    image, args = argv[i], argv[i + 1:]
    if gpus and not os.environ.get("TGI_TOOLKIT_STANDIN_DOCKER_GPUS"):
        print("docker: Error response from daemon: could not select device driver \"\" with capabilities: "
              "[[gpu]].", file=sys.stderr)
        return 125
    if "text-generation-inference" not in image:
        print(f"Unable to find image '{image}' locally", file=sys.stderr)
        return 125
    name = name or f"standin_{os.getpid()}"
    state = docker_state()
    if (state / f"{name}.pid").exists() and pid_alive(int((state / f"{name}.pid").read_text())):
        print(f'docker: Error response from daemon: Conflict. The container name "/{name}" is already in use.',
              file=sys.stderr)
        return 125
    # The container sees only the variables given with -e, plus what the image sets and the GPU runtime.
    container_env = {"PATH": os.environ.get("PATH", ""), "PORT": "80", "HF_HOME": "/data", **env,
                     "STANDIN_CONTAINER": name}
    for key in ("TGI_TOOLKIT_STANDIN", "TGI_TOOLKIT_STANDIN_DELAY", "TGI_TOOLKIT_STANDIN_TAG"):
        if key in os.environ:  # test plumbing, not part of the container's view
            container_env[key] = os.environ[key]
    if gpus:
        devices = gpus.strip("'\"")
        container_env["NVIDIA_VISIBLE_DEVICES"] = devices.removeprefix("device=") if devices != "all" else "all"
    host_port = None
    for mapping in ports:
        parts = mapping.split(":")
        if parts[-1] in ("80", "80/tcp"):
            host_port = parts[-2]
    if host_port:
        container_env["STANDIN_BIND_PORT"] = host_port
    log_path, rc_path, pid_path = state / f"{name}.log", state / f"{name}.rc", state / f"{name}.pid"
    for p in (log_path, rc_path):
        p.unlink(missing_ok=True)
    # A signal before the container's pid is known is held and forwarded then, as the real client (one Go
    # process, its handlers set before it starts anything) does: on a loaded machine the container answered
    # /health while this client had not yet read its pid, and a parent's death then left the container running.
    held: list[int] = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda signum, frame: held.append(signum))
    # The container runs under the daemon, not under this client: double fork so it is no descendant.
    r, w = os.pipe()
    middle = os.fork()
    if middle == 0:
        for sig in (signal.SIGTERM, signal.SIGINT):  # the daemon's side keeps no handler of the client's
            signal.signal(sig, signal.SIG_DFL)
        os.setsid()
        if os.fork() == 0:
            os.close(r)
            devnull = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):  # the daemon's shim holds none of the client's pipes
                os.dup2(devnull, fd)
            with open(log_path, "ab", buffering=0) as log:
                proc = subprocess.Popen([sys.executable, __file__, "tgi", *args], stdout=log,
                                        stderr=subprocess.STDOUT, env=container_env, stdin=subprocess.DEVNULL)
            os.write(w, f"{proc.pid}\n".encode())
            os.close(w)
            code = proc.wait()
            # Written whole, then renamed: the client reads it as soon as it exists, and an empty file read
            # mid-write made it raise and exit through interpreter shutdown, where a SIGTERM kills it (-15).
            partial_rc = rc_path.with_name(rc_path.name + ".tmp")
            partial_rc.write_text(str(128 - code if code < 0 else code))
            os.replace(partial_rc, rc_path)
            os._exit(0)
        os._exit(0)
    os.close(w)
    os.waitpid(middle, 0)
    pid = int(os.read(r, 64).decode().strip())
    os.close(r)
    pid_path.write_text(str(pid))

    def proxy(signum: int, frame: object) -> None:  # --sig-proxy: the client forwards signals
        if pid_alive(pid):
            os.kill(pid, signum)

    signal.signal(signal.SIGTERM, proxy)
    signal.signal(signal.SIGINT, proxy)
    for signum in held:
        proxy(signum, None)
    # Follow the container's output like an attached `docker run`.
    offset = 0
    while True:
        done = not pid_alive(pid)
        if log_path.exists():
            with open(log_path, "rb") as f:
                f.seek(offset)
                chunk = f.read()
            offset += len(chunk)
            if chunk:
                try:
                    sys.stdout.buffer.write(chunk)
                    sys.stdout.flush()
                except OSError:
                    pass
        if done:
            break
        time.sleep(0.05)
    for _ in range(40):
        if rc_path.exists():
            break
        time.sleep(0.05)
    code = int(rc_path.read_text()) if rc_path.exists() else 137
    if "--rm" in argv[:i]:
        for p in (log_path, rc_path, pid_path):
            p.unlink(missing_ok=True)
    return code


if __name__ == "__main__":
    kind, rest = sys.argv[1], sys.argv[2:]
    if kind == "shard":
        sys.exit(shard())
    code = {"tgi": tgi, "vllm": vllm, "docker": docker, "openai": openai_server}[kind](rest)
    # Exit now: a signal that lands during interpreter shutdown would find the default handler
    # and turn a clean exit into "killed by SIGTERM" (a real docker client has no such window).
    with contextlib.suppress(OSError):
        sys.stdout.flush()
    os._exit(code)
