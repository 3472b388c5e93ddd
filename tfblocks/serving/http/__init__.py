"""`tfblocks-serve`'s HTTP translation server, an ASGI app (Starlette, run by uvicorn).

Requests of concurrent clients are gathered into one batch by `batching.Batcher`: a single
worker thread runs every translation, so a batch is one call of the model however many
clients wait on it. `app.make_app` holds the routes: LibreTranslate's `POST /translate`
and `GET /languages`, the native `POST /v1/translate`, the page at `/`, `GET /health`
and `GET /metrics` (`metrics.Metrics`, Prometheus' text format). `requests` turns a
request's body into the texts and options of a translation, refusing what the limits
(`Limits`) do not allow. The model itself comes from the caller: the app knows nothing of
run folders (`tfblocks.cli.serve` loads it with `tfblocks.translation.engines`).

Needs the `serve` extra (`pip install "tfblocks[serve]"`); see docs/serving-http.md.
"""
