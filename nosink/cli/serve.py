"""``nosink serve``: chat and embeddings from one copy of the weights over OpenAI's HTTP API.

The parser and the handler; the server itself is :mod:`nosink.serve`.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import replace
from typing import Any

from nosink.checks import count_arg, printable
from nosink.cli.args import TEMPLATES, Parser, number, positive_float
from nosink.cli.inputs import EXAMPLE_SPEC, model_path, saved_encoder

API_KEY_ENV = "NOSINK_API_KEY"  # the API key of `nosink serve` when --api-key is not given


def add_parser(commands: Any) -> None:
    p = commands.add_parser(
        "serve",
        help="serve chat and embeddings from one copy of the weights (OpenAI-compatible HTTP)",
        arguments=_arguments,
    )
    p.set_defaults(handler=run)


def _arguments(p: Parser) -> None:
    p.add_argument("model", help="hub id, local folder, saved encoder, or 'demo'")
    p.add_argument("--spec", action="append", type=_config, metavar="SPEC",
                   help=f"an embedding configuration, [NAME=]SPEC[ @ exit M][ @ template T]: a layer spec, e.g. "
                   f"'{EXAMPLE_SPEC}', optionally an early exit and a one-prompt template "
                   f"({', '.join(t for t in TEMPLATES if t != 'MetaEOL')}). Repeat it with a NAME each to serve "
                   "several from one model, e.g. --spec 'sts=F* | M0B*8 @ exit 20' --spec 'eol=F* | B*4 @ template "
                   "PromptEOL'; a request's model picks one, and one without NAME is served under the model's id. "
                   "Optional for a saved encoder")  # fmt: skip
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=_port, default=8000, help="port to listen on, 1 to 65535")
    p.add_argument("--api-key", default=None, help=f"require 'Authorization: Bearer KEY' (default: ${API_KEY_ENV})")
    p.add_argument("--no-chat", action="store_true", help="serve embeddings only (loads no LM head)")
    p.add_argument("--name", help="model id clients send (default: the last part of the hub id or folder)")
    p.add_argument("--prompts", nargs="+", default=[], metavar="NAME=TEXT",
                   help="named embedding instructions, chosen per request by prompt_name (\\n: newline)")  # fmt: skip
    p.add_argument("--dtype", default=None, help="weights' dtype (float32, bfloat16, ...; default: the checkpoint's)")
    p.add_argument("--device", default=None, help="cpu, cuda, ... (default: cpu)")
    p.add_argument("--max-inputs", type=count_arg(), default=256, help="texts per embeddings request")
    p.add_argument("--max-tokens-per-text", type=count_arg(), default=512,
                   help="tokens per text, sink and prompt included")  # fmt: skip
    p.add_argument("--batch-size", type=count_arg(), default=8,
                   help="texts per forward pass (8 suits a CPU; raise on a GPU)")  # fmt: skip
    p.add_argument("--chat-share", type=number(0, 1, low_included=False, high_included=False), default=0.5,
                   metavar="S", help="the model's time chat steps get while embedding requests wait too, above 0 "
                   "and below 1; the rest goes to embedding batches")  # fmt: skip
    p.add_argument("--workers", type=_workers, default="auto", metavar="N",
                   help="front-end processes that read requests and write answers while one process runs the "
                        "model; 0: one process (default auto: 0 on the CPU, half the cores, 1 to 8, on a GPU)",
                   )  # fmt: skip
    p.add_argument(
        "--no-cuda-graphs",
        action="store_true",
        help="run embedding batches without CUDA graphs (on by default on a GPU in float16/bfloat16)",
    )
    scheduling = p.add_mutually_exclusive_group()  # how chat steps share the GPU with embedding batches
    scheduling.add_argument(
        "--chat-riding",
        action="store_true",
        help="experimental: on a GPU, an embedding batch that is due carries the chats' next tokens in its own forward "
        "(by default chat steps and batches take turns; see the serving guide for what it measured)",
    )
    scheduling.add_argument(
        "--chat-stream",
        action="store_true",
        help="experimental: on a GPU, chat steps run on a CUDA stream of their own, beside the embedding batch in "
        "flight (by default both share the model's stream); not with --chat-riding",
    )
    p.add_argument(
        "--chat-compile",
        action="store_true",
        help="experimental: chat decode steps run through torch.compile (fewer, fused kernels: a step 1.6-1.8x faster "
        "on an H200), compiled before the server starts serving (minutes)",
    )
    p.add_argument("--prepend", type=count_arg(), metavar="K",
                   help="Token Prepending before layers 1..K for every embedding configuration (default: a saved "
                        "encoder's own; chat never sees it)")  # fmt: skip
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"],
                   help="uvicorn's log level (info logs every request; warning: errors and warnings only)")  # fmt: skip
    p.add_argument("--header-timeout", type=positive_float, default=10.0, metavar="SECONDS",
                   help="time for a request's headers, else 408 and the connection closed")  # fmt: skip
    p.add_argument("--body-timeout", type=positive_float, default=30.0, metavar="SECONDS",
                   help="time for a request's body after its headers, else 408")  # fmt: skip
    p.add_argument("--max-connections-per-client", type=count_arg(), default=64,
                   help="open connections from one IP address, more are refused with 503")  # fmt: skip
    p.add_argument("--max-connections", type=count_arg(), default=512,
                   help="open connections in all, more are refused with 503")  # fmt: skip


def _config(text: str) -> tuple[str | None, Any, frozenset[str]]:
    """An argparse ``type`` for ``--spec``: ``(NAME or None, Config, what it states of exit and template)`` of
    ``[NAME=]SPEC[ @ exit M][ @ template T]``."""
    from nosink.serve.configs import parse_config_stating

    try:
        return parse_config_stating(text)
    except ValueError as err:  # SpecError is one: its caret lines are kept in one message
        raise argparse.ArgumentTypeError(str(err)) from None


def configs(
    given: list[tuple[str | None, Any, frozenset[str]]] | None, saved: dict[str, Any] | None, model: str
) -> dict[str, Any]:
    """``{model id: Config}`` served by ``nosink serve``: the ``--spec`` values, else the saved encoder's spec, exit
    layer and template. Over a saved encoder a ``--spec`` keeps the encoder's exit layer and template where it
    states none of its own (``@ exit M``, ``@ template T``; ``@ template none`` for none), as
    ``from_pretrained(FOLDER, spec=...)`` and ``nosink encode FOLDER --spec ...`` do.

    Raises:
        ValueError: for two configurations without a name, or one name given twice.
    """
    from nosink.models.saved import template_from_json
    from nosink.serve.configs import Config

    if not given:
        assert saved is not None  # saved_encoder() refused a plain decoder without --spec
        return {model: Config(saved["spec"], saved.get("exit_layer"), template_from_json(saved.get("template")))}
    unnamed = [config for name, config, _ in given if name is None]
    if len(unnamed) > 1:
        raise ValueError(
            f"{len(unnamed)} --spec values have no name; one may be served under the model's id, name the others: "
            "--spec 'NAME=SPEC'"
        )
    out: dict[str, Any] = {}
    for name, config, stated in given:
        key = model if name is None else name
        if saved is not None:  # what the configuration leaves out is the saved encoder's
            if "exit" not in stated:
                config = replace(config, exit_layer=saved.get("exit_layer"))
            if "template" not in stated:
                config = replace(config, template=template_from_json(saved.get("template")))
        if key in out:
            why = " (the model's id, which a --spec without NAME takes)" if key == model else ""
            raise ValueError(f"--spec names {key!r} twice{why}: give each configuration its own name")
        out[key] = config
    return out


def _port(text: str) -> int:
    """An argparse ``type`` for ``--port``: an integer from 1 to 65535, refused at parse time."""
    value = count_arg()(text)  # an integer, positive (positive_int)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"a port is from 1 to 65535, got {value}")
    return value


def _workers(text: str) -> int | str:
    """An argparse ``type`` for ``--workers``: ``auto`` or an integer from 0 to 64."""
    if text == "auto":
        return text
    if not text.isdigit() or int(text) > 64:
        raise argparse.ArgumentTypeError(f"--workers is auto or an integer from 0 to 64, got {printable(repr(text))}")
    return int(text)


def workers_for(given: int | str, device: Any, cpus: int | None = None) -> int:
    """Front-end processes for ``--workers``: ``auto`` is half the machine's cores, 1 to 8, on a GPU (the model's
    process only launches kernels; on a 16-core H200 machine 8 front-ends served 64 one-text clients 1.2x as
    fast as 4, with a third of the p99 latency) and 0 on the CPU (whose cores run the model: more processes
    would take them away). ``cpus``: the cores to count (``os.cpu_count()`` by default)."""
    if given != "auto":
        return int(given)
    if device is None or getattr(device, "type", str(device).split(":")[0]) == "cpu":
        return 0
    return max(1, min(8, (cpus or os.cpu_count() or 2) // 2))


def api_key(given: str | None, env: str | None) -> str | None:
    """The key ``nosink serve`` requires: ``--api-key``, else ``$NOSINK_API_KEY``, else None (no key).

    An empty or blank key is refused, never read as "no key": it is what an unset shell variable gives
    (``--api-key "$KEY"``), and serving without authentication must be asked for by giving no key at all.
    """
    for value, where, fix in (
        (given, "--api-key", "give the key, or leave --api-key out to serve without one"),
        (env, f"${API_KEY_ENV}", "set it to the key, or unset it to serve without one"),
    ):
        if value is not None:
            if not value.strip():
                raise ValueError(f"{where} is empty (an unset shell variable?): {fix}")
            from nosink.serve import check_api_key

            return check_api_key(value, where)
    return None


def run(args: argparse.Namespace) -> int:
    import torch

    from nosink.serve import Limits, bind, create_app, load_model
    from nosink.serve import run as serve
    from nosink.serve.app import model_id

    prompts = {}
    for item in args.prompts:
        name, sep, text = item.partition("=")
        if not sep or not name:
            raise ValueError(f"--prompts takes NAME=TEXT, got {printable(repr(item))}")
        prompts[name] = text.replace("\\n", "\n").replace("\\t", "\t")  # a typed \n is a newline
    key = api_key(args.api_key, os.environ.get(API_KEY_ENV))
    path = model_path(args.model)
    saved = saved_encoder(path, args.spec or None)  # a saved encoder's nosink.json holds its spec (and sink token)
    name = args.name or model_id(path)
    spec = configs(args.spec, saved, name)
    sink_token = saved.get("sink_token", "auto") if saved is not None else "auto"
    prepend = args.prepend or (tuple(saved["prepend"]) if saved is not None and saved.get("prepend") else None)
    sockets = bind(args.host, args.port)  # before the model loads: a taken port fails now, in one line
    try:
        model, tokenizer = load_model(path, chat=not args.no_chat, dtype=args.dtype, device=args.device)
        limits = Limits(max_inputs=args.max_inputs, max_tokens_per_text=args.max_tokens_per_text,
                        batch_size=args.batch_size, chat_share=args.chat_share, header_timeout_s=args.header_timeout,
                        body_timeout_s=args.body_timeout, max_connections=args.max_connections,
                        max_connections_per_client=args.max_connections_per_client)  # fmt: skip
        app = create_app(model, tokenizer, spec, name=name, chat=not args.no_chat, prompts=prompts,
                         api_key=key, limits=limits, sink_token=sink_token,
                         cuda_graphs=not args.no_cuda_graphs, prepend=prepend,
                         chat_riding=args.chat_riding, chat_stream=args.chat_stream,
                         chat_compile=args.chat_compile)  # fmt: skip
        what = app.state.served.described()
        access = "API key required" if key else "no API key: anyone who can reach the port can use it"

        def started(url: str) -> None:
            print(f"serving {what} on {url}/v1 ({access})", file=sys.stderr)

        device = next(model.parameters()).device
        workers = workers_for(args.workers, device)
        if device.type == "cuda":
            # The host only pads batches and launches kernels: torch's CPU thread pool would spin on cores
            # that the front-end processes and the tokenizer need (measured: batches 2-3x slower under load).
            torch.set_num_threads(1)
        if workers:
            what += f", {workers} front-end processes"
        serve(app, host=args.host, port=args.port, sockets=sockets, on_started=started, workers=workers,
              log_level=args.log_level)  # fmt: skip
    finally:
        for sock in sockets:  # serve() closes them once served; here if it never ran
            sock.close()
    return 0
