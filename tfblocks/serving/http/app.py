"""`make_app`: the Starlette app of `tfblocks-serve`: its routes, the API key, the body
limit, JSON errors and the access log.

Routes: `GET /` (the page), `GET /health`, `GET /metrics`, `GET /languages`,
`POST /translate` (LibreTranslate's shape) and `POST /v1/translate` (the native one).
Every error is `{"error": "one line"}` with its status; an unexpected one is logged with
its traceback on the server's standard error and answered 500 without it.
"""

import hmac
import importlib.resources
import json
import sys
import time
import traceback

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from tfblocks.serving.http import requests as parsing
from tfblocks.serving.http.batching import QueueFullError
from tfblocks.serving.http.metrics import CONTENT_TYPE
from tfblocks.serving.http.requests import RequestError

# The paths counted by name in the metrics; any other is counted as "other".
PATHS = ("/", "/health", "/metrics", "/languages", "/translate", "/v1/translate")


def log(line):
    """Writes one line of the server's log to standard error."""
    print(f"tfblocks-serve: {line}", file=sys.stderr, flush=True)


def make_app(batcher, directions, limits, metrics, api_key=None, log_texts=False):
    """The ASGI app that answers with `batcher` (a started `batching.Batcher` whose
    options are `requests.Options` and whose results are, per text, its `(text, score)`
    hypotheses, best first).

    Args:
        batcher: the `Batcher`; `/health` is 200 once its `ready` is set.
        directions: the model's `requests.Directions`.
        limits: the `requests.Limits` of one request.
        metrics: the `metrics.Metrics` that `/metrics` reports.
        api_key: when given, the translation routes need it (`Authorization: Bearer
            KEY`, or `api_key` in the body as LibreTranslate takes it): 401 without.
        log_texts: log each request's texts too (by default the log has no text, and no
            query string, which the page's links carry texts in).
    """
    page = importlib.resources.files(__package__).joinpath("page.html").read_text("utf-8")

    async def translate(request, parse, answer):
        start = time.monotonic()
        fields = await _fields(request, limits.max_body_bytes)
        _check_key(request, fields, api_key)
        if not batcher.ready.is_set():
            raise RequestError(503, "the model is loading; try again shortly",
                               {"Retry-After": "5"})  # fmt: skip
        job = parse(fields, limits, directions)
        if log_texts:
            log(f"texts of {request.url.path}: {json.dumps(job.items, ensure_ascii=False)}")
        try:
            results = await batcher.submit(job.options, job.items, limits.timeout_s)
        except QueueFullError as error:
            raise RequestError(503, f"the server is busy: {error}; try again",
                               {"Retry-After": "1"}) from None  # fmt: skip
        except TimeoutError:
            raise RequestError(504, f"the translation took longer than this server's "
                                    f"{limits.timeout_s:g} s (--timeout)") from None  # fmt: skip
        except ValueError as error:  # a refused option or phrase, said by the model's code
            raise RequestError(400, " ".join(str(error).split())) from None
        metrics.latency.labels(request.url.path).observe(time.monotonic() - start)
        return JSONResponse(answer(job, results))

    async def libretranslate(request):
        return await translate(request, parsing.libretranslate_job, parsing.libretranslate_answer)

    async def native(request):
        return await translate(request, parsing.native_job,
                               lambda job, results: parsing.native_answer(results))  # fmt: skip

    async def languages(request):
        return JSONResponse(directions.languages())

    async def health(request):
        if batcher.failure is not None:
            return JSONResponse({"error": "the model failed to load"}, 503)
        if not batcher.ready.is_set():
            return JSONResponse({"error": "the model is loading"}, 503, {"Retry-After": "5"})
        return JSONResponse({"status": "ready", "queue": batcher.queue_length()})

    async def show_metrics(request):
        return Response(metrics.text(), media_type=CONTENT_TYPE)

    async def show_page(request):
        return HTMLResponse(page)

    routes = [
        Route("/", show_page, methods=["GET"]),
        Route("/health", health, methods=["GET"]),
        Route("/metrics", show_metrics, methods=["GET"]),
        Route("/languages", languages, methods=["GET"]),
        Route("/translate", libretranslate, methods=["POST"]),
        Route("/v1/translate", native, methods=["POST"]),
    ]
    handlers = {RequestError: _refused, HTTPException: _http_error, Exception: _unexpected}
    app = Starlette(routes=routes, exception_handlers=handlers)
    return _AccessLog(app, metrics, log_texts)


async def _fields(request, limit):
    """The fields of the request's body (`parsing.parse_body`), read up to `limit` bytes
    (413 beyond, before reading when `Content-Length` says so)."""
    length = request.headers.get("content-length", "")
    if length.isdigit() and int(length) > limit:
        raise RequestError(413, f"the body has {length} bytes; this server takes at most "
                                f"{limit} (--max-body-bytes)")  # fmt: skip
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise RequestError(413, f"the body has more than {limit} bytes; this server takes "
                                    f"at most {limit} (--max-body-bytes)")  # fmt: skip
        chunks.append(chunk)
    body = b"".join(chunks)
    content_type = request.headers.get("content-type", "")
    form = None
    if content_type.lower().startswith("multipart/form-data"):

        async def replay():
            return {"type": "http.request", "body": body, "more_body": False}

        try:
            read = await Request(request.scope, replay).form()
        except Exception as error:  # python-multipart's own error types
            raise RequestError(400, f"the multipart form cannot be read: {error}") from None
        form = [(name, value) for name, value in read.multi_items() if isinstance(value, str)]
    return parsing.parse_body(body, content_type, form)


def _check_key(request, fields, api_key):
    """Refuses (401) a request without the server's `api_key` (None: none needed)."""
    if api_key is None:
        return
    header = request.headers.get("authorization", "")
    given = header[7:].strip() if header.lower().startswith("bearer ") else fields.get("api_key")
    if not isinstance(given, str) or not hmac.compare_digest(given.encode(), api_key.encode()):
        raise RequestError(401, "this server needs its API key: send `Authorization: Bearer "
                                "KEY` or `api_key` in the body")  # fmt: skip


async def _refused(request, error):
    return JSONResponse({"error": error.message}, error.status, error.headers)


async def _http_error(request, error):
    messages = {404: f"no such path: {request.url.path}",
                405: f"{request.method} is not allowed on {request.url.path}"}  # fmt: skip
    message = messages.get(error.status_code, str(error.detail))
    return JSONResponse({"error": message}, error.status_code, getattr(error, "headers", None))


async def _unexpected(request, error):
    log("".join(traceback.format_exception(error)).rstrip())
    message = " ".join(str(error).split()) or type(error).__name__
    return JSONResponse({"error": f"internal error: {type(error).__name__}: {message}"}, 500)


class _AccessLog:
    """ASGI middleware: one log line and one count per HTTP request (method, path,
    status, milliseconds; the query string only with `log_texts`)."""

    def __init__(self, app, metrics, log_texts):
        self.app, self.metrics, self.log_texts = app, metrics, log_texts

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        start, status = time.monotonic(), [500]

        async def send_status(message):
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            path = scope["path"]
            self.metrics.answered(path if path in PATHS else "other", status[0])
            query = scope.get("query_string", b"").decode("latin-1")
            shown = path + (f"?{query}" if query and self.log_texts else "")
            client = (scope.get("client") or ("-",))[0]
            milliseconds = (time.monotonic() - start) * 1000
            log(f'{client} "{scope["method"]} {shown}" {status[0]} {milliseconds:.0f} ms')
