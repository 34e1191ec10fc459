"""``nosink serve`` starting up: the command line's checks before anything loads, binding a port, saying when it
serves and why it could not, front-end processes, Ctrl-C, and what importing the package pulls in.

A tiny random Llama (with its LM head) and the word-level test tokenizer, given a chat template, saved to a
folder where the command needs one.
"""

import http.client
import json
import logging
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from plain_http import request_json
from tiny import tiny_chat_model

import nosink.serve
from nosink.serve import ServerThread, bind, create_app, run

ROOT = Path(__file__).resolve().parents[1]
SPEC = "F* | M0B*2"
TEXTS = ["the cat sat on the mat", "a dog ran in the park", "paris is the capital of france"]

# With pytest-xdist these tests run on test_serve.py's worker (--dist loadgroup), where they were before.
pytestmark = pytest.mark.xdist_group("test_serve")


def test_importing_nosink_does_not_import_the_web_stack():
    code = "import sys, nosink, nosink.cli, nosink.serve; print(sorted(m for m in ('fastapi', 'uvicorn') if m in sys.modules))"  # noqa: E501
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def _saved_chat_model(folder):
    lm, tok = tiny_chat_model()
    lm.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def _free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_a_device_this_machine_lacks_is_one_clear_error_before_loading(tmp_path, capsys, monkeypatch):
    from nosink.cli import main
    from nosink.serve import check_device, load_model

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    folder = _saved_chat_model(tmp_path / "m")
    with pytest.raises(ValueError, match=r"^CUDA is not available \(.*\); use --device cpu$"):
        load_model(folder, device="cuda")
    with pytest.raises(ValueError, match=r"^unknown device 'gpu0': use cpu, cuda"):
        load_model(folder, device="gpu0")
    assert check_device("cpu") == torch.device("cpu") and check_device(None) is None
    assert main(["serve", str(folder), "--spec", SPEC, "--port", str(_free_port()), "--device", "cuda:1"]) == 1
    err = _errors(capsys.readouterr().err)
    assert len(err) == 1 and err[0].startswith("nosink: error: CUDA is not available") and "--device cpu" in err[0]


def test_cli_serve_loads_once_and_serves_on_localhost(tmp_path, monkeypatch):
    from nosink.cli import main

    folder = _saved_chat_model(tmp_path / "m")
    port, seen = _free_port(), {}

    def fake_run(app, host, port, sockets, on_started, workers, log_level):
        seen.update(app=app, host=host, port=port, bound=[s.getsockname() for s in sockets], workers=workers)
        seen.update(log_level=log_level)

    monkeypatch.setattr(nosink.serve, "run", fake_run)
    monkeypatch.setenv("NOSINK_API_KEY", "from-env")
    args = ["serve", str(folder), "--spec", SPEC, "--port", str(port), "--prompts", "query=what is\\n", "q2=a"]
    assert main(args) == 0
    limits = seen["app"].state.limits
    assert (limits.header_timeout_s, limits.body_timeout_s, limits.max_connections_per_client) == (10, 30, 64)
    more = ["--header-timeout", "2.5", "--body-timeout", "7", "--max-connections-per-client", "3"]
    assert main([*args, *more, "--max-connections", "9"]) == 0
    limits = seen["app"].state.limits
    assert (limits.header_timeout_s, limits.body_timeout_s, limits.max_connections_per_client) == (2.5, 7, 3)
    assert limits.max_connections == 9 and limits.chat_share == 0.5
    assert main([*args, "--chat-share", "0.25"]) == 0
    assert seen["app"].state.limits.chat_share == 0.25
    assert (seen["host"], seen["port"], seen["bound"]) == ("127.0.0.1", port, [("127.0.0.1", port)])
    assert seen["workers"] == 0  # auto: one process on the CPU, whose cores run the model
    assert seen["log_level"] == "info"
    assert main([*args, "--workers", "3", "--log-level", "warning"]) == 0
    assert (seen["workers"], seen["log_level"]) == (3, "warning")
    app = seen["app"]
    assert app.state.name == "m" and app.state.encoder.decoder is app.state.model.model
    with ServerThread(app) as running:
        status, got = request_json(running, "GET", "/v1/models", headers={"Authorization": "Bearer from-env"})
        assert status == 200 and got["data"][0]["prompts"] == ["q2", "query"]
        assert request_json(running, "GET", "/v1/models")[0] == 401


def test_the_model_id_is_named_in_one_place(tmp_path, monkeypatch):
    from nosink.cli import main
    from nosink.serve import load_model

    folder = _saved_chat_model(tmp_path / "my-model")
    apps = []
    monkeypatch.setattr(nosink.serve, "run", lambda app, **kwargs: apps.append(app))
    monkeypatch.chdir(folder)
    assert main(["serve", ".", "--spec", SPEC, "--port", str(_free_port())]) == 0  # the folder ".": its own name
    assert main(["serve", str(folder) + "/", "--spec", SPEC, "--port", str(_free_port()), "--name", "mine"]) == 0
    assert [app.state.name for app in apps] == ["my-model", "mine"]
    model, tok = load_model(folder)
    assert create_app(model, tok, SPEC).state.name == "my-model"  # the library names it as the command line does
    lm, tok = tiny_chat_model()
    assert create_app(lm, tok, SPEC).state.name == "model"  # built in code: no folder to name it after


@pytest.mark.parametrize("port", ["0", "70000", "-1", "http"])
def test_cli_serve_refuses_a_port_out_of_range_before_anything_else(tmp_path, capsys, port):
    from nosink.cli import main

    with pytest.raises(SystemExit) as exit:  # the folder does not exist either: the port is refused first
        main(["serve", str(tmp_path / "missing"), "--spec", SPEC, "--port", port])
    assert exit.value.code == 2
    err = capsys.readouterr().err
    assert "argument --port" in err and "missing" not in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("device", "cpus", "expected"),
    [("cpu", 16, 0), (None, 16, 0), ("cuda", 16, 8), ("cuda:1", 64, 8), ("cuda", 6, 3), ("cuda", 1, 1)],
)
def test_auto_workers_are_half_the_cores_up_to_8_on_a_gpu_and_none_on_the_cpu(device, cpus, expected):
    from nosink.cli.serve import workers_for

    assert workers_for("auto", None if device is None else torch.device(device), cpus=cpus) == expected
    assert workers_for(5, torch.device("cuda"), cpus=cpus) == 5  # a number given is taken as it is


@pytest.mark.parametrize("workers", ["-1", "65", "two", "1.5"])
def test_cli_serve_refuses_a_bad_number_of_workers_before_anything_else(tmp_path, capsys, workers):
    from nosink.cli import main

    with pytest.raises(SystemExit) as exit:
        main(["serve", str(tmp_path / "missing"), "--spec", SPEC, "--workers", workers])
    assert exit.value.code == 2
    err = capsys.readouterr().err
    assert "argument --workers" in err and "auto or an integer from 0 to 64" in err and "Traceback" not in err


def _errors(text):
    """The lines of ``text`` (stderr) other than progress bars (transformers' loading and saving)."""
    return [line for line in text.splitlines() if line.strip() and not re.search(r"\| \d+/\d+ \[", line)]


def _ctrl_c_as_a_terminal_sends_it():
    """Run in the child before it starts: SIGINT back to its default, so that Python installs its Ctrl-C
    handler. A background job of a shell without job control inherits SIGINT ignored, and uvicorn re-raises an
    ignored SIGINT into nothing (the server then exits 0, not 130)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.fixture
def ctrl_c():
    """Ctrl-C raises KeyboardInterrupt during the test, even where pytest was started with SIGINT ignored."""
    saved = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, saved)


@pytest.fixture
def uvicorn_logging():
    """uvicorn configures its loggers for each server it builds (to the stderr of the moment): restore them."""
    loggers = [logging.getLogger(name) for name in ("uvicorn", "uvicorn.error", "uvicorn.access")]
    saved = [(log.level, list(log.handlers), log.propagate) for log in loggers]
    yield
    for log, (level, handlers, propagate) in zip(loggers, saved, strict=True):
        log.setLevel(level)
        log.handlers[:] = handlers
        log.propagate = propagate


def _taken():
    """A socket listening on a free localhost port: that port is taken."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    return sock


def test_cli_serve_on_a_taken_port_fails_in_one_line_before_loading_the_model(tmp_path, capsys, monkeypatch):
    from nosink.cli import main

    loaded = []
    monkeypatch.setattr(nosink.serve, "load_model", lambda *a, **k: loaded.append(a))
    folder = _saved_chat_model(tmp_path / "m")
    with _taken() as other:
        port = other.getsockname()[1]
        assert main(["serve", str(folder), "--spec", SPEC, "--port", str(port)]) == 1
    assert loaded == []
    err = _errors(capsys.readouterr().err)
    assert len(err) == 1, err
    assert err[0].startswith(f"nosink: error: cannot listen on 127.0.0.1:{port}: ") and "in use" in err[0], err


def test_cli_serve_whose_server_fails_to_start_says_why_in_one_line(tmp_path, capfd, monkeypatch, uvicorn_logging):
    from nosink.cli import main

    def fail(self):
        raise RuntimeError("no thread for the model")

    monkeypatch.setattr(nosink.serve.engine.Engine, "start", fail)  # the app's startup fails inside uvicorn
    folder = _saved_chat_model(tmp_path / "m")
    assert main(["serve", str(folder), "--spec", SPEC, "--port", str(_free_port())]) == 1
    err = _errors(capfd.readouterr().err)
    assert len(err) == 1, err  # no "serving ..." line, no uvicorn log lines, no traceback
    assert err[0].startswith("nosink: error: the server did not start: ") and "no thread for the model" in err[0]


def test_cli_serve_says_serving_once_it_accepts_connections(tmp_path):
    folder = _saved_chat_model(tmp_path / "m")
    port = _free_port()
    cmd = [sys.executable, "-m", "nosink", "serve", str(folder), "--spec", SPEC, "--port", str(port), "--no-chat"]
    server = subprocess.Popen(
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, preexec_fn=_ctrl_c_as_a_terminal_sends_it
    )
    try:
        before = []
        for line in server.stderr:  # ends when the process does: the test fails on its stderr, not a timeout
            if line.startswith("serving "):
                break
            before.append(line)
        no_key = "no API key: anyone who can reach the port can use it"
        assert line == f"serving m (spec {SPEC}) on http://127.0.0.1:{port}/v1 ({no_key})\n", before
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        conn.request("GET", "/health")  # at once, no retry: the server listens before it says so
        assert conn.getresponse().status == 200
        conn.close()
    finally:
        server.send_signal(signal.SIGINT)
        rest = server.communicate(timeout=120)[1]
    assert server.returncode == 130 and rest.strip().endswith("nosink: error: interrupted"), rest


def test_cli_serve_with_front_end_processes_serves_and_stops_them_on_ctrl_c(tmp_path):
    folder = _saved_chat_model(tmp_path / "m")
    port = _free_port()
    cmd = [sys.executable, "-m", "nosink", "serve", str(folder), "--spec", SPEC, "--port", str(port), "--workers", "2"]
    server = subprocess.Popen(
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, preexec_fn=_ctrl_c_as_a_terminal_sends_it
    )
    children = []
    try:
        for line in server.stderr:  # ends when the process does: the test fails on its stderr, not a timeout
            if line.startswith("serving "):
                break
        assert line.startswith(f"serving m (spec {SPEC}, chat), 2 front-end processes on http://127.0.0.1:{port}/v1")
        children = [int(p) for p in Path(f"/proc/{server.pid}/task/{server.pid}/children").read_text().split()]
        assert len(children) >= 2  # the front-ends (and multiprocessing's resource tracker)
        body = json.dumps({"model": "m", "input": TEXTS})
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        conn.request("POST", "/v1/embeddings", body, {"Content-Type": "application/json"})
        answer = conn.getresponse()
        assert answer.status == 200 and len(json.loads(answer.read())["data"]) == len(TEXTS)
        conn.close()
    finally:
        server.send_signal(signal.SIGINT)
        rest = server.communicate(timeout=120)[1]
    assert server.returncode == 130 and rest.strip().endswith("nosink: error: interrupted"), rest
    for pid in children:  # none is left behind
        deadline = time.monotonic() + 30  # a bound on waiting, not a timing assertion
        while Path(f"/proc/{pid}").exists() and "Z" not in _state(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not Path(f"/proc/{pid}").exists() or "Z" in _state(pid), pid


def _state(pid):
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except OSError:
        return "gone"


def test_bind_refuses_a_taken_port_or_a_bad_one():
    with _taken() as other:
        port = other.getsockname()[1]
        with pytest.raises(OSError, match=rf"^cannot listen on 127\.0\.0\.1:{port}: .*in use"):
            bind("127.0.0.1", port)
        with pytest.raises(OSError, match=rf"^cannot listen on 127\.0\.0\.1:{port}: "):
            ServerThread(create_app(*tiny_chat_model(), SPEC), port=port).start()
    for port in (70000, -1, True, "80"):
        with pytest.raises(ValueError, match="from 0 to 65535"):
            bind("127.0.0.1", port)
    (sock,) = bind("127.0.0.1", 0)
    with sock:
        assert sock.getsockname()[0] == "127.0.0.1" and sock.getsockname()[1] > 0


def test_run_says_when_it_started_and_turns_a_failed_start_into_one_error(capfd, monkeypatch, uvicorn_logging, ctrl_c):
    lm, tok = tiny_chat_model()
    app = create_app(lm, tok, SPEC, name="tiny", chat=False)
    urls = []

    def started(url):  # called by the server's event loop once it listens (so no HTTP request can be answered here)
        urls.append(url)
        with socket.create_connection(("127.0.0.1", int(url.rsplit(":", 1)[1])), timeout=60):
            urls.append("connected")  # the system accepts the connection: the socket listens
        signal.raise_signal(signal.SIGINT)  # Ctrl-C: uvicorn stops, then raises it again as KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run(app, port=0, on_started=started, log_level="warning")
    assert len(urls) == 2 and urls[0].startswith("http://127.0.0.1:") and urls[1] == "connected"
    monkeypatch.setattr(nosink.serve.engine.Engine, "start", lambda self: 1 / 0)
    app = create_app(lm, tok, SPEC, name="tiny", chat=False)
    capfd.readouterr()
    with pytest.raises(OSError, match=r"^the server did not start: .*ZeroDivisionError: division by zero"):
        run(app, port=0, on_started=urls.append)
    assert len(urls) == 2 and "ERROR" not in capfd.readouterr().err  # held back: the exception says it


@pytest.mark.parametrize(
    ("argv", "env", "named"),
    [(["--api-key", ""], None, "--api-key"), (["--api-key", "  "], None, "--api-key"), ([], "", "$NOSINK_API_KEY")],
    ids=["empty --api-key", "blank --api-key", "empty NOSINK_API_KEY"],
)
def test_cli_serve_refuses_an_empty_api_key_before_loading_the_model(tmp_path, capsys, monkeypatch, argv, env, named):
    from nosink.cli import main

    # `--api-key "$KEY"` with KEY unset gives "": that must not mean "serve without a key".
    loaded, served = [], []
    monkeypatch.setattr(nosink.serve, "load_model", lambda *a, **k: loaded.append(a))
    monkeypatch.setattr(nosink.serve, "run", lambda app, **kwargs: served.append(app))
    if env is None:
        monkeypatch.delenv("NOSINK_API_KEY", raising=False)
    else:
        monkeypatch.setenv("NOSINK_API_KEY", env)
    folder = _saved_chat_model(tmp_path / "m")
    assert main(["serve", str(folder), "--spec", SPEC, "--port", str(_free_port()), *argv]) == 1
    assert loaded == [] and served == []
    err = _errors(capsys.readouterr().err)
    assert len(err) == 1 and err[0].startswith(f"nosink: error: {named} is empty") and "without one" in err[0], err


def test_cli_serve_refuses_a_key_no_client_can_send_before_loading_the_model(tmp_path, capsys, monkeypatch):
    from nosink.cli import main

    loaded = []
    monkeypatch.setattr(nosink.serve, "load_model", lambda *a, **k: loaded.append(a))
    monkeypatch.delenv("NOSINK_API_KEY", raising=False)
    folder = _saved_chat_model(tmp_path / "m")
    assert main(["serve", str(folder), "--spec", SPEC, "--port", str(_free_port()), "--api-key", "key "]) == 1
    err = _errors(capsys.readouterr().err)
    assert loaded == [] and len(err) == 1 and "--api-key has spaces at its ends" in err[0], err


def test_cli_serve_says_whether_an_api_key_is_required(tmp_path, capsys, monkeypatch):
    from nosink.cli import main

    monkeypatch.setattr(nosink.serve, "run", lambda app, on_started, **kwargs: on_started("http://127.0.0.1:1"))
    folder = _saved_chat_model(tmp_path / "m")
    monkeypatch.delenv("NOSINK_API_KEY", raising=False)
    for argv, said in [
        ([], "no API key: anyone who can reach the port can use it"),
        (["--api-key", "k"], "API key required"),
    ]:
        assert main(["serve", str(folder), "--spec", SPEC, "--port", str(_free_port()), *argv]) == 0
        assert _errors(capsys.readouterr().err) == [f"serving m (spec {SPEC}, chat) on http://127.0.0.1:1/v1 ({said})"]
    monkeypatch.setenv("NOSINK_API_KEY", "from-env")
    assert main(["serve", str(folder), "--spec", SPEC, "--port", str(_free_port())]) == 0
    assert _errors(capsys.readouterr().err)[-1].endswith("(API key required)")


def test_cli_serve_reads_a_saved_encoders_spec_and_asks_a_plain_model_for_one(tmp_path, capsys, monkeypatch):
    from nosink import EncoderFromDecoder
    from nosink.cli import main

    served = []
    monkeypatch.setattr(nosink.serve, "run", lambda app, **kwargs: served.append(app))
    lm, tok = tiny_chat_model()
    EncoderFromDecoder(lm.model, "F* | B", tok, sink_token="<s>").save_pretrained(tmp_path / "enc")
    assert main(["serve", str(tmp_path / "enc"), "--no-chat", "--port", str(_free_port())]) == 0
    encoder = served[-1].state.encoder
    assert str(encoder.spec) == "F* | B" and encoder.sink_token == "<s>"  # nosink.json's spec and sink token
    assert main(["serve", str(tmp_path / "enc"), "--no-chat", "--spec", SPEC, "--port", str(_free_port())]) == 0
    assert str(served[-1].state.encoder.spec) == SPEC  # --spec wins over the saved one
    assert served[-1].state.encoder.cuda_graphs is True  # on by default; --no-cuda-graphs turns them off
    argv = ["serve", str(tmp_path / "enc"), "--no-chat", "--no-cuda-graphs", "--port", str(_free_port())]
    assert main(argv) == 0
    assert served.pop().state.encoder.cuda_graphs is False
    folder = _saved_chat_model(tmp_path / "m")
    capsys.readouterr()
    assert main(["serve", str(folder), "--port", str(_free_port())]) == 1
    err = _errors(capsys.readouterr().err)
    assert err == [f"nosink: error: {folder} is a plain decoder: give --spec, e.g. --spec 'F* | M0B*4'"], err
    assert len(served) == 2


def _engines(tmp_path, monkeypatch, *flag_sets: list[str]) -> list:
    """The engine of the app ``nosink serve`` (a saved chat model, ``--spec SPEC``) would run with each of
    ``flag_sets`` (the server itself never starts)."""
    from nosink.cli import main

    served = []
    monkeypatch.setattr(nosink.serve, "run", lambda app, **kwargs: served.append(app))
    folder = _saved_chat_model(tmp_path / "m")
    for flags in flag_sets:
        assert main(["serve", str(folder), "--spec", SPEC, *flags, "--port", str(_free_port())]) == 0
    return [app.state.engine for app in served]


def test_cli_serve_takes_turns_between_chat_steps_and_batches_unless_told_to_let_chats_ride(tmp_path, monkeypatch):
    plain, riding = _engines(tmp_path, monkeypatch, [], ["--chat-riding"])
    assert plain.riding is False and riding.riding is True


def test_cli_serve_runs_chat_steps_on_their_own_stream_when_told(tmp_path, monkeypatch, capsys):
    import nosink.serve.engine as engine_module
    from nosink.cli import main

    own = object()  # on a CPU there is no stream of its own: a stand-in shows the flag reached the engine
    monkeypatch.setattr(engine_module, "_own_stream", lambda lm: own)
    plain, stream = _engines(tmp_path, monkeypatch, [], ["--chat-stream"])
    assert plain.chat_stream is None and stream.chat_stream is own
    capsys.readouterr()
    served = []
    monkeypatch.setattr(nosink.serve, "run", lambda app, **kwargs: served.append(app))
    with pytest.raises(SystemExit) as stopped:  # argparse's own refusal, before any model is loaded
        main(["serve", str(tmp_path / "m"), "--spec", SPEC, "--chat-riding", "--chat-stream"])
    assert stopped.value.code == 2 and "not allowed with argument" in capsys.readouterr().err
    assert not served


def test_cli_serve_compiles_chat_steps_when_told(tmp_path, monkeypatch):
    plain, compiled = _engines(tmp_path, monkeypatch, [], ["--chat-compile"])
    for engine, compiles in ((plain, False), (compiled, True)):
        chats = engine.chats
        assert (chats.rows._compiled is not None) is compiles and chats.incoming._compiled is None  # decode steps


def test_cli_serve_refuses_a_prompt_without_a_name(tmp_path, capsys):
    from nosink.cli import main

    # Like every CLI failure: one line on stderr and a non-zero exit, before any model is loaded.
    assert main(["serve", str(tmp_path), "--spec", SPEC, "--prompts", "noequals"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "NAME=TEXT" in err[0] and "'noequals'" in err[0]
