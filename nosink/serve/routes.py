"""The HTTP routes: ``/v1/embeddings``, ``/v1/chat/completions``, ``/v1/models`` and ``/health``.

:func:`build_app` reads requests, tokenizes them and hands the work to an engine; it needs no weights,
only what :class:`Served` describes, so the same routes run beside the model or in a front-end process.
"""

import asyncio
import functools
import hmac
import logging
import time
import uuid
from collections.abc import AsyncIterator, Container
from contextlib import asynccontextmanager
from typing import Any, Protocol

from nosink.checks import printable
from nosink.models import texts as _texts
from nosink.serve.jobs import ChatJob, EmbedJob
from nosink.serve.limits import ApiError
from nosink.serve.requests import (
    check_supported,
    embedding_options,
    field,
    json_body,
    messages_of,
    sampling_of,
    texts_of,
    until_done,
)
from nosink.serve.responses import dumps, embedding_body
from nosink.serve.served import Served

logger = logging.getLogger(__name__)

# Requests of at most this many characters are tokenized in the event loop, longer ones in a thread.
_INLINE_CHARS = 4096

# Codes of the web framework's own routing errors; any other status: "http_error".
_HTTP_ERRORS = {404: "not_found", 405: "method_not_allowed"}


class Runs(Protocol):
    """What the routes need of an engine: :class:`~nosink.serve.engine.Engine` or a remote one."""

    def start(self) -> None: ...
    def stop(self) -> None: ...
    def submit(self, job: EmbedJob | ChatJob) -> None: ...
    def cancel(self, job: EmbedJob | ChatJob) -> None: ...
    def health(self) -> dict[str, int]: ...


class Direct:
    """ASGI middleware that hands ``POST path`` requests to ``handler`` (a route's function of a ``Request``) and
    everything else to the app: the same route without the framework's per-request work.

    Args:
        app: the rest of the application.
        path: the one path taken here (other methods on it, and every other path, go to ``app``).
        handler: the route's function: a request to a response; raises :class:`ApiError` to refuse.
        failed: the app's handler of unexpected exceptions (``request, err -> response``).
    """

    def __init__(self, app: Any, path: str, handler: Any, failed: Any) -> None:
        self.app, self.path, self.handler, self.failed = app, path, handler, failed

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"] != self.path or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        from fastapi import Request
        from fastapi.responses import JSONResponse

        request = Request(scope, receive, send)
        try:
            response = await self.handler(request)
        except ApiError as err:
            response = JSONResponse(err.body(), status_code=err.status)
        except Exception as err:
            response = await self.failed(request, err)
        await response(scope, receive, send)


def dumps_text(body: Any) -> str:
    """``body`` as a JSON string (a server-sent event's data)."""
    return dumps(body).decode()


def build_app(served: Served, engine: Runs) -> Any:
    """The FastAPI app of ``served``, handing its work to ``engine`` (started and stopped with the app).

    Raises:
        ImportError: if FastAPI is not installed (``pip install "nosink[serve]"``).
    """
    try:
        from fastapi import FastAPI, Request
        from fastapi.exceptions import RequestValidationError
        from fastapi.responses import JSONResponse, Response, StreamingResponse
        from starlette.concurrency import run_in_threadpool
        from starlette.exceptions import HTTPException
    except ImportError as err:
        raise ImportError('serving needs FastAPI and uvicorn: pip install "nosink[serve]"') from err

    name, tokenizer, limits, api_key, chat = served.name, served.tokenizer, served.limits, served.api_key, served.chat
    prompts, sink, positions, started = served.prompts, served.sink, served.positions, served.started
    configs = served.embeddings

    @asynccontextmanager
    async def lifespan(app: Any) -> AsyncIterator[None]:
        engine.start()
        try:
            yield
        finally:
            await run_in_threadpool(engine.stop)

    # No OpenTelemetry hooks: FastAPI asks on every request whether a provider is configured (about 5% of a
    # front-end's CPU per request); this app records nothing to export.
    quiet = {"tracing": False, "metrics": False, "logs": False}
    app = FastAPI(title="nosink", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None, telemetry=quiet)
    app.state.engine, app.state.served, app.state.name = engine, served, name
    app.state.limits = limits  # the HTTP server's timeouts and connection caps are read from here

    @app.exception_handler(ApiError)
    async def api_error(request: Any, err: ApiError) -> Any:
        return JSONResponse(err.body(), status_code=err.status)

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Any, err: Any) -> Any:
        where = ".".join(str(x) for x in err.errors()[0].get("loc", ())) if err.errors() else "request"
        return JSONResponse(ApiError(400, f"invalid request at {printable(where)}", "invalid_request").body(), 400)

    @app.exception_handler(HTTPException)
    async def http_error(request: Any, err: Any) -> Any:
        code = _HTTP_ERRORS.get(err.status_code, "http_error")
        return JSONResponse(ApiError(err.status_code, str(err.detail), code).body(), status_code=err.status_code)

    @app.exception_handler(Exception)
    async def internal_error(request: Any, err: Exception) -> Any:
        logger.exception("request failed")
        return JSONResponse(ApiError(500, "internal server error", "internal_error", kind="server_error").body(), 500)

    def authorize(request: Request) -> None:
        # Called first in each /v1 route rather than as a FastAPI dependency: resolving a dependency costs
        # more CPU than the check itself, on every request (see the serving guide's front-end measurements).
        if api_key is None:
            return
        given = request.headers.get("authorization", "")
        scheme, _, token = given.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), api_key.encode()):
            raise ApiError(401, "a valid API key is required: Authorization: Bearer <key>", "invalid_api_key")

    def check_model(data: dict, serves: Container[str]) -> str:
        """The request's ``model``, if it is one that ``serves`` holds (chat's id, or the embedding ids)."""
        asked = data.get("model")
        if not isinstance(asked, str):
            raise ApiError(400, "'model' is required: a string", "invalid_type", "model")
        if asked not in serves:
            shown = printable(repr(asked))[:200]
            if asked in served.ids():  # served, but not at this endpoint
                there = "serves embeddings only" if asked in configs else "serves chat only"
                message = f"model {shown} {there}; this server serves {served.described()}"
            else:
                message = f"model {shown} is not served here; this server serves {served.described()}"
            raise ApiError(404, message, "model_not_found", "model")
        return asked

    @app.get("/health")
    async def health() -> Any:
        return {"status": "ok", **(await run_in_threadpool(engine.health))}

    @app.get("/v1/models")
    async def models(request: Request) -> Any:
        authorize(request)
        cards = []
        for ident in served.ids():
            config = configs.get(ident)
            card = {"id": ident, "object": "model", "created": started, "owned_by": "nosink"}
            none = {"spec": None, "exit_layer": None, "template": None, "dimensions": None}
            card.update(config.card() if config is not None else none)
            card.update(chat=chat and ident == name, prompts=sorted(prompts) if config is not None else [])
            cards.append(card)
        return {"object": "list", "data": cards}

    @app.post("/v1/embeddings")
    async def embeddings(request: Request) -> Any:
        authorize(request)
        data = await json_body(request, limits.max_body_bytes)
        model_name = check_model(data, configs)
        config = configs[model_name]
        texts = texts_of(data, limits.max_inputs)
        fmt, width, instruction = embedding_options(data, config.dims, prompts)
        # Tokenized once, as the configuration frames its texts: the tokens counted against the limit here are
        # the tokens the engine runs.
        tokenize = functools.partial(_texts.tokenize, tokenizer, texts, instruction, sink=sink, **config.framing())
        try:
            # A short request is tokenized here: handing it to a thread costs more than its tokens (the
            # thread waits for the interpreter lock); a long one in a thread, so others are not held up.
            short = sum(map(len, texts)) <= _INLINE_CHARS
            tokens = tokenize() if short else await run_in_threadpool(tokenize)
        except (TypeError, ValueError) as err:
            raise ApiError(400, printable(str(err)), "invalid_input", "input") from None
        lengths = tokens.lengths
        over = [i for i, n in enumerate(lengths) if n > limits.max_tokens_per_text]
        if over:
            i = over[0]
            raise ApiError(
                400,
                f"input[{i}] has {lengths[i]} tokens (with the sink token, prompt and template); this server takes at "
                f"most {limits.max_tokens_per_text} per text ({len(over)} of {len(texts)} inputs are over)",
                "context_length_exceeded",
                "input",
            )
        if tokens.empty:
            raise ApiError(400, f"input[{tokens.empty[0]}] has no tokens: nothing to embed", "empty_input", "input")
        job = EmbedJob(tokens, model_name)
        engine.submit(job)

        vectors = await until_done(request, asyncio.wrap_future(job.future), lambda: engine.cancel(job))
        return Response(embedding_body(vectors, width, fmt, model_name, sum(lengths)), media_type="application/json")

    # The hot path, straight to its handler: past FastAPI's routing, dependency solving and exception middleware,
    # which cost about a quarter of a front-end's CPU on a one-text request (see the serving guide). Its errors get
    # the bodies the app's handlers give; middleware added to the app later still wraps it.
    app.add_middleware(Direct, path="/v1/embeddings", handler=embeddings, failed=internal_error)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Any:
        authorize(request)
        data = await json_body(request, limits.max_body_bytes)
        if not chat:
            raise ApiError(404, "this server serves embeddings only (started without chat)", "chat_disabled")
        model_name = check_model(data, [name])
        check_supported(data)
        messages = messages_of(data)
        stream = field(data, "stream", (bool,), "true or false", False)
        options = field(data, "stream_options", (dict,), "an object", {})
        include_usage = options.get("include_usage") is True

        def render() -> list[int]:
            text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
            return list(tokenizer(text, add_special_tokens=False)["input_ids"])

        try:
            prompt_ids = await run_in_threadpool(render)
        except Exception as err:  # the template's own refusals (jinja exceptions): the messages do not fit it
            raise ApiError(
                400,
                f"the chat template refused these messages: {printable(str(err))[:300]}",
                "invalid_messages",
                "messages",
            ) from None
        if len(prompt_ids) > limits.max_prompt_tokens:
            raise ApiError(
                400,
                f"the prompt has {len(prompt_ids)} tokens; this server takes at most {limits.max_prompt_tokens}",
                "context_length_exceeded",
                "messages",
            )
        sampling = sampling_of(data, limits, len(prompt_ids), positions)
        loop = asyncio.get_running_loop()
        events: asyncio.Queue = asyncio.Queue()
        job = ChatJob(prompt_ids, sampling, lambda event: loop.call_soon_threadsafe(events.put_nowait, event))
        engine.submit(job)
        ident, created = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())

        def usage(completion: int) -> dict[str, int]:
            return {
                "prompt_tokens": len(prompt_ids),
                "completion_tokens": completion,
                "total_tokens": len(prompt_ids) + completion,
            }

        if not stream:
            parts: list[str] = []
            while True:
                event = await until_done(request, asyncio.ensure_future(events.get()), lambda: engine.cancel(job))
                if event[0] == "delta":
                    parts.append(event[1])
                elif event[0] == "error":
                    raise ApiError(500, event[1], "generation_failed", kind="server_error")
                else:
                    break
            message = {"role": "assistant", "content": "".join(parts)}
            return JSONResponse(
                {
                    "id": ident,
                    "object": "chat.completion",
                    "created": created,
                    "model": model_name,
                    "choices": [{"index": 0, "message": message, "finish_reason": event[1], "logprobs": None}],
                    "usage": usage(event[2]),
                }
            )

        def chunk(delta: dict, finish: str | None = None) -> str:
            body = {
                "id": ident,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model_name,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
            }
            if include_usage:
                body["usage"] = None
            return f"data: {dumps_text(body)}\n\n"

        async def sse() -> AsyncIterator[str]:
            try:
                yield chunk({"role": "assistant", "content": ""})
                while True:
                    event = await events.get()
                    if event[0] == "delta":
                        yield chunk({"content": event[1]})
                    elif event[0] == "error":
                        error = ApiError(500, event[1], "generation_failed", kind="server_error")
                        yield f"data: {dumps_text(error.body())}\n\n"
                        return
                    else:
                        yield chunk({}, event[1])
                        if include_usage:
                            tail = {
                                "id": ident,
                                "object": "chat.completion.chunk",
                                "created": created,
                                "model": model_name,
                                "choices": [],
                                "usage": usage(event[2]),
                            }
                            yield f"data: {dumps_text(tail)}\n\n"
                        yield "data: [DONE]\n\n"
                        return
            finally:
                engine.cancel(job)  # a no-op once done; stops the generation if the client went away

        return StreamingResponse(sse(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"})

    return app
