"""One process serves chat and embeddings from one copy of a decoder's weights (OpenAI-compatible HTTP).

:func:`create_app` builds the encoder with :meth:`EncoderFromDecoder.from_model` (its parameters are the
LM's tensors) and serves ``POST /v1/embeddings``, ``POST /v1/chat/completions`` (with ``stream``),
``GET /v1/models`` and ``GET /health``; several embedding configurations (a spec, an early exit, a
template: :class:`Config`) can be served from the one model, each under its own model id. One engine
thread runs every forward pass, so the encoder and the LM, which share every layer, never interleave.
:func:`bind` binds the address before the model loads; :func:`run` and :class:`ServerThread` serve on it.
The serving guide (``docs/guides/serving.md``) gives the request fields, batching, limits and error codes.

The modules, one job each: ``limits`` (what a request may ask, and the error answer), ``loading`` (the
model and the server's settings), ``configs`` (embedding configurations and their syntax), ``requests``
(reading request bodies), ``responses`` (writing answers), ``jobs`` (the work handed to the engine),
``embedding`` (embedding batches), ``generation`` (chat decoding), ``engine`` (the model's thread),
``served`` (what is served, without weights), ``routes`` (the HTTP routes over a ``Served`` and an
engine), ``app`` (assembling them from a model), ``http`` (binding and uvicorn).

Needs the ``serve`` extra (FastAPI, uvicorn and orjson); ``import nosink`` does not import it.
"""

from nosink.serve.app import create_app
from nosink.serve.configs import Config
from nosink.serve.http import ServerThread, bind, run
from nosink.serve.limits import ApiError, Limits
from nosink.serve.loading import check_api_key, check_device, load_model

__all__ = [
    "ApiError",
    "Config",
    "Limits",
    "ServerThread",
    "bind",
    "check_api_key",
    "check_device",
    "create_app",
    "load_model",
    "run",
]
