"""The HTTP surface: OpenAI's endpoints and llama-server's /health and /slots,
over a Service (server/service.py). The Engine runs the requests; this layer
only parses, streams and watches for clients that leave."""

from __future__ import annotations

import asyncio
import secrets
import threading
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import Depends, FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, Response, StreamingResponse
from fastapi.staticfiles import StaticFiles
from prometheus_client import CONTENT_TYPE_LATEST

from ggspec.engine.stream import GenerationStream
from ggspec.server.errors import APIError, error_body, error_response, validation_error
from ggspec.server.protocol import ChatRequest, Completion, CompletionRequest
from ggspec.server.responses import Reply, sse
from ggspec.server.service import Service

_STATIC = Path(__file__).with_name("static")
_OPEN = ("/", "/health")  # what needs no API key, with the chat page's files: they hold no data
_DISCONNECT_POLL_S = 0.1     # how often a non-streaming request checks that its client is still there


def create_app(service: Service) -> FastAPI:
    @asynccontextmanager
    async def lifespan(_app: FastAPI):
        threading.Thread(target=service.load, name="ggspec-load", daemon=True).start()
        yield
        await run_in_threadpool(service.close)

    async def authorize(request: Request) -> None:
        """With --api-key, every route but _OPEN needs it (the page's files are not routes)."""
        key = service.config.api_key
        if key is None or request.url.path in _OPEN:
            return
        given = request.headers.get("authorization", "")
        token = given[7:] if given.lower().startswith("bearer ") else request.headers.get("x-api-key", "")
        if not secrets.compare_digest(token.encode(), key.encode()):
            raise APIError(401, "invalid or missing API key (Authorization: Bearer KEY)")

    # the key is a dependency, not an HTTP middleware: behind Starlette's BaseHTTPMiddleware
    # a request never sees its client disconnect
    app = FastAPI(title="ggspec", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None,
                  dependencies=[Depends(authorize)])

    @app.exception_handler(APIError)
    async def _api_error(_request: Request, exc: APIError):
        return error_response(exc)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_request: Request, exc: RequestValidationError):
        return error_response(validation_error(exc))

    @app.exception_handler(Exception)
    async def _failed(_request: Request, exc: Exception):
        return JSONResponse(error_body(500, f"{type(exc).__name__}: {exc}"), status_code=500)

    app.mount("/static", StaticFiles(directory=_STATIC), name="static")

    @app.get("/", include_in_schema=False)
    async def chat_page():
        return FileResponse(_STATIC / "index.html")

    @app.get("/health")
    async def health():
        if not service.ready.is_set():
            return JSONResponse(error_body(503, "Loading model"), status_code=503)
        if service.error is not None:
            return JSONResponse(error_body(500, f"the model failed to load: {service.error}"), status_code=500)
        return {"status": "ok"}

    @app.get("/v1/models")
    async def models():
        service.require_loaded()
        model = service.model
        template = "the model's" if model.has_chat_template else "ChatML (the model has none)"
        return {"object": "list", "data": [{
            "id": service.model_id, "object": "model", "created": 0, "owned_by": "ggspec",
            "meta": {"arch": model.target.arch, "n_ctx": model.n_ctx, "n_vocab": model.target.n_vocab,
                     "slots": service.config.slots, "chat_template": template}}]}

    @app.get("/slots")
    async def slots():
        service.require_loaded()
        return service.slots()

    @app.get("/metrics")
    async def metrics():
        return Response(service.metrics.exposition(), media_type=CONTENT_TYPE_LATEST)

    @app.post("/v1/completions")
    async def completions(body: CompletionRequest, request: Request):
        return await _serve(service, body, request, chat=False)

    @app.post("/v1/chat/completions")
    async def chat_completions(body: ChatRequest, request: Request):
        return await _serve(service, body, request, chat=True)

    return app


async def _serve(service: Service, body: Completion, request: Request, chat: bool):
    try:
        request_id, stream = await run_in_threadpool(service.submit, body)  # tokenizing takes a while
    except ValueError as e:  # the engine's checks of a prompt or of speculation options
        raise APIError(400, str(e)) from None
    reply = Reply(chat, service.model_id, request_id, body.return_tokens, service.model.tokenizer.token_to_piece)
    if body.stream:
        return _RequestEvents(stream, _events(stream, reply, body.include_usage), media_type="text/event-stream",
                              headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
    watch = asyncio.create_task(_cancel_when_gone(request, stream))
    try:
        async for _piece in stream:
            pass
        result = stream.result
    except ValueError as e:  # the request's own (a drafter that cannot serve the model)
        raise APIError(400, str(e)) from None
    except asyncio.CancelledError:  # the shutdown's grace ran out
        return error_response(APIError(503, "the request was cancelled: the server is shutting down"))
    finally:
        watch.cancel()
        stream.cancel()  # a no-op once it has ended
    if result.stats["stop"] == "cancelled":
        raise APIError(503, "the request was cancelled: the server is shutting down")
    return reply.complete(result)


class _RequestEvents(StreamingResponse):
    """A request's SSE response: however it ends, the request ends with it (a client that
    leaves before the first event included: then the generator never starts)."""

    def __init__(self, stream: GenerationStream, content, **options):
        super().__init__(content, **options)
        self._stream = stream

    async def __call__(self, scope, receive, send):
        try:
            await super().__call__(scope, receive, send)
        except asyncio.CancelledError:
            pass  # the shutdown's grace ran out: the response ends here, and the request with it
        finally:
            self._stream.cancel()  # a no-op once it has ended


async def _events(stream: GenerationStream, reply: Reply, include_usage: bool):
    """The SSE events of a request; each text piece's chunk carries its tokens' logprobs."""
    if reply.chat:
        yield sse(reply.chunk("", role=True))
    sent = chars = 0  # logprobs and characters sent so far
    async for piece in stream:
        logprobs = stream.logprobs(sent)
        yield sse(reply.chunk(piece, logprobs=logprobs, offset=chars))
        sent += len(logprobs)
        chars += len(piece)
    try:
        result = stream.result
    except Exception as e:  # noqa: BLE001 - the request's error, after a 200 has gone out
        yield sse(error_body(400 if isinstance(e, ValueError) else 500, str(e)))
        return
    for chunk in reply.last_chunks(result, include_usage, sent, chars):
        yield sse(chunk)
    yield sse("[DONE]")


async def _cancel_when_gone(request: Request, stream: GenerationStream) -> None:
    while not stream.done:
        if await request.is_disconnected():
            stream.cancel()
            return
        await asyncio.sleep(_DISCONNECT_POLL_S)


__all__ = ["create_app"]
