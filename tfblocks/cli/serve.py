"""`tfblocks-serve`: an HTTP translation server for a trained model.

Serves `--model` (a run folder, preset or SavedModel; a CTranslate2 model with
`--engine ctranslate2`) at http://HOST:PORT: LibreTranslate's API (`POST /translate`,
`GET /languages`), a native one with n-best lists, scores, target prefixes and
constraints (`POST /v1/translate`), a page to try it (`GET /`; `/?q=TEXT&source=ja&
target=en` translates on load), `GET /health` (200 once the model is loaded and has
translated a line, 503 before) and `GET /metrics` (Prometheus). The requests of
concurrent clients are translated together in one batch (`--max-batch-tokens`,
`--max-wait-ms`); every set of request options (n-best count, prefix, constraints,
beam, direction) shares one loaded model. An imported M2M-100 / NLLB run translates
between any two of its languages (`source` / `target`: its codes). It writes
`listening on http://HOST:PORT` once the port is open and `ready on http://HOST:PORT`
once the model translates, on standard error with its log.
SIGTERM or Ctrl-C stops it after the requests in flight are answered. Needs the `serve`
extra (pip install "tfblocks[serve]"); docs/serving-http.md has the APIs and settings.

Examples:
  tfblocks-serve --model runs/enja
  tfblocks-serve --model runs/enja --host 0.0.0.0 --port 8000 --api-key "$KEY"
  tfblocks-serve --model runs/enja/ctranslate2 --engine ctranslate2 --max-wait-ms 20
  curl -s localhost:8080/translate -d q=今日のランチはカレーだ。 -d source=ja -d target=en
"""

import collections
import os
import signal

from tfblocks.cli.arguments import add_model_argument, add_verbose_argument, command_parser
from tfblocks.cli.console import run_command
from tfblocks.translation.xla_cache import run_folder_of, use_run_cache

# The translators kept at once, one per set of request options (n-best count, prefix,
# constraints, beam, direction), all over one loaded model; the least recently used one
# is dropped beyond (its search's compiled programs with it).
MAX_LOADED = 8
# What the worker translates before `/health` says ready: the first call traces and
# compiles the search.
WARM_UP_TEXT = "Hello."
# `--flag`: (default, metavar, help); the limits and the batching, all positive.
LIMITS = {
    "--max-batch-tokens": (2048, "N", "the most subwords of one batch, estimated as a text's "
                           "UTF-8 bytes / 4 + 1; a batch is translated once it holds this many"),
    "--max-wait-ms": (10, "MS", "how long the oldest waiting request waits for others to join "
                      "its batch, in milliseconds (0: no waiting)"),
    "--max-queue": (128, "N", "the most requests waiting for a batch; beyond, 503 with "
                    "Retry-After"),
    "--max-body-bytes": (1 << 20, "N", "the most bytes of a request's body; beyond, 413"),
    "--max-chars": (5000, "N", "the most characters of one text; beyond, 400"),
    "--max-texts": (64, "N", "the most texts of one request; beyond, 400"),
}  # fmt: skip


def parse_args(argv=None):
    parser = command_parser("tfblocks-serve", __doc__)
    add_model_argument(parser)
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to listen on (default 127.0.0.1: this machine only; "
                        "0.0.0.0: every interface)")  # fmt: skip
    parser.add_argument("--port", type=int, default=8080,
                        help="port to listen on (default 8080; 0: any free port, which the "
                        "`listening on` line names)")  # fmt: skip
    parser.add_argument("--engine", default="tensorflow", choices=["tensorflow", "ctranslate2"],
                        help="what translates (default tensorflow)")  # fmt: skip
    parser.add_argument("--xla", default="on", choices=["on", "off"],
                        help="compile a run folder's or preset's decoding with XLA (default "
                        "on: fastest once each batch size is compiled; off: one TensorFlow "
                        "graph for every shape, no compiling, slower per batch); not for a "
                        "SavedModel or CTranslate2")  # fmt: skip
    parser.add_argument("--beam-size", type=int, default=None,
                        help="the beam size, and the widest a request may ask for (default: "
                        "the run's, 4 unless its run.json records another; a SavedModel's "
                        "was fixed at export)")  # fmt: skip
    for flag, (default, metavar, help_) in LIMITS.items():
        parser.add_argument(flag, type=int, default=default, metavar=metavar,
                            help=f"{help_} (default {default})")  # fmt: skip
    parser.add_argument("--timeout", type=float, default=60.0, metavar="S",
                        help="seconds a request waits for its translation; beyond, 504 "
                        "(default 60)")  # fmt: skip
    parser.add_argument("--api-key", default=os.environ.get("TFBLOCKS_SERVE_API_KEY"),
                        metavar="KEY",
                        help="answer the translation routes only with this key (Authorization: "
                        "Bearer KEY, or api_key in the body), 401 without (default: "
                        "$TFBLOCKS_SERVE_API_KEY, else no key)")  # fmt: skip
    parser.add_argument("--log-texts", action="store_true",
                        help="log the texts of each request and the query strings (default: "
                        "the log holds no text)")  # fmt: skip
    add_verbose_argument(parser)
    args = parser.parse_args(argv)
    check_arguments(parser, args)
    return args


def check_arguments(parser, args):
    """Refuses (`parser.error`) a bound that cannot work, naming the flag and the value."""
    for flag in LIMITS:
        value = getattr(args, flag[2:].replace("-", "_"))
        low = 0 if flag == "--max-wait-ms" else 1
        if value < low:
            parser.error(f"{flag} must be {low} or more, got {flag}={value}")
    if not 0 <= args.port <= 65535:
        parser.error(f"--port must be 0 to 65535, got --port={args.port}")
    if args.beam_size is not None and args.beam_size <= 0:
        parser.error(f"--beam-size must be a positive integer, got --beam-size={args.beam_size}")
    if not args.timeout > 0:
        parser.error(f"--timeout must be a number of seconds above 0, got --timeout={args.timeout}")
    if args.api_key is not None and not args.api_key.strip():
        parser.error("--api-key must not be empty (leave it out for a server without a key)")
    if args.engine == "ctranslate2" and len(args.model) > 1:
        parser.error(f"--engine ctranslate2 takes one --model, got {len(args.model)}")
    if args.engine == "ctranslate2" and args.xla == "off":
        parser.error("--xla off: CTranslate2 compiles nothing; drop it or use --engine tensorflow")


def main(argv=None):
    args = parse_args(argv)
    for path in args.model:  # before the port opens
        if not os.path.isdir(path):
            raise ValueError(f"`--model` must be a directory, got --model={path!r}.")
    # The first run folder's compiled programs (one cache a process: TensorFlow's flag).
    use_run_cache(run_folder_of(args.model), "tfblocks-serve")
    import uvicorn

    from tfblocks.serving.http import batching, requests
    from tfblocks.serving.http.app import log, make_app
    from tfblocks.serving.http.metrics import Metrics

    engine = _Engine(args)
    limits = requests.Limits(
        max_body_bytes=args.max_body_bytes, max_chars=args.max_chars, max_texts=args.max_texts,
        beam_size=engine.widest_beam(), timeout_s=args.timeout,
    )  # fmt: skip
    metrics = Metrics()
    batcher = batching.Batcher(engine.translate_for, args.max_batch_tokens,
                               args.max_wait_ms / 1000, args.max_queue, metrics)  # fmt: skip
    app = make_app(batcher, engine.directions(), limits, metrics, args.api_key,
                   args.log_texts)  # fmt: skip
    config = uvicorn.Config(app, host=args.host, port=args.port, log_level="warning",
                            access_log=False, lifespan="off")  # fmt: skip
    server = uvicorn.Server(config)
    sock = config.bind_socket()
    sock.listen(config.backlog)  # connections wait from now on, not refused before uvicorn runs
    host, port = sock.getsockname()[:2]
    address = f"http://{host}:{port}" if ":" not in host else f"http://[{host}]:{port}"

    def warm_up():
        engine.translate_for(requests.Options())([WARM_UP_TEXT])
        log(f"ready on {address} ({engine.description})")

    def failed(error):
        server.should_exit = True  # the error is reported once the server has stopped

    log(f"listening on {address}; loading {', '.join(args.model)}")
    batcher.start(warm_up, failed)
    # uvicorn stops gracefully on SIGTERM, then raises it again with the handler found
    # before it ran: this one, so that a graceful stop exits with status 0.
    signal.signal(signal.SIGTERM, lambda number, frame: setattr(server, "should_exit", True))
    server.run(sockets=[sock])
    batcher.stop()
    if batcher.failure is not None:
        raise batcher.failure
    log("stopped")


class _Engine:
    """The model's translate functions, one per `requests.Options`, each made by
    `engines.load_translate` on first use (in the batcher's worker thread) and kept
    (`MAX_LOADED`); the model itself is loaded once, by the first, and shared by all
    (`models`, load_translate's `loaded`). A result is, per text, its `(text, score)`
    hypotheses, best first (score None where a SavedModel has no `n_best` signature)."""

    def __init__(self, args):
        self.args = args
        self.loaded = collections.OrderedDict()
        self.models = {}  # what load_translate loaded, for the next options to share
        self.description = ", ".join(args.model)

    def is_saved_model(self):
        """Whether `--model` is a SavedModel (no preset there: `engines`' rule)."""
        model = self.args.model[0]
        presets = [os.path.join(model, "model", "config.json"), os.path.join(model, "config.json")]
        return self.args.engine == "tensorflow" and not any(map(os.path.isfile, presets))

    def widest_beam(self):
        """The widest beam a request may ask for: `--beam-size`, else the run's; None for
        a SavedModel (fixed at export)."""
        from tfblocks.translation.run_folder import run_beam_size

        if self.is_saved_model():
            return None  # its beam was fixed at export
        return self.args.beam_size or run_beam_size(self.args.model[0])

    def directions(self):
        """The `requests.Directions` of the run of `--model` (`run.json`): its one
        direction, or its several (`tfblocks-train --pairs`, whose sources are tagged),
        or any two languages of an imported M2M-100 / NLLB run served from its preset
        (`TokenDirections`; its SavedModel or CTranslate2 model: its own direction),
        or none."""
        from tfblocks.serving.http import requests
        from tfblocks.translation.run_folder import (
            run_language_codes,
            run_language_tokens,
            run_languages,
            run_pairs,
        )

        model = self.args.model[0]
        codes, kind = run_language_codes(model)
        own = run_language_tokens(model)
        if codes and own and self.args.engine == "tensorflow" and not self.is_saved_model():
            shown = [code.strip("_") if kind == "m2m100" else code for code in codes]
            return requests.TokenDirections(shown, _token_direction(codes, kind, own))
        pairs = run_pairs(model)
        if pairs:
            from tfblocks.text.multilingual import tag_source

            return requests.Directions([pair.split("-") for pair in pairs], tag=tag_source)
        languages = run_languages(model)
        return requests.Directions([languages] if languages else [])

    def translate_for(self, options):
        if options in self.loaded:
            self.loaded.move_to_end(options)
            return self.loaded[options]
        translate = self._load(options)
        if self.args.engine == "tensorflow" and self.args.xla == "on":  # a program a size
            translate = _padded(translate)
        self.loaded[options] = translate
        if len(self.loaded) > MAX_LOADED:
            self.loaded.popitem(last=False)
        return translate

    def _load(self, options):
        from tfblocks.serving.http.app import log
        from tfblocks.translation import engines

        args = self.args
        model = args.model if len(args.model) > 1 else args.model[0]
        beam = options.beam_size or args.beam_size

        search = None
        if options.sampling is not None:
            from tfblocks.decoding import Sampling

            top_k, top_p, temperature, seed = options.sampling
            search = Sampling(top_k=top_k, top_p=top_p, temperature=temperature, seed=seed)

        def load(n_best):
            return engines.load_translate(
                model, None if search else beam, None, None, args.engine, log, n_best=n_best,
                search=search,
                prefix=options.prefix, constraints=options.constraints,
                language_tokens=options.direction, loaded=self.models,
                xla="off" if args.xla == "off" else None,
            )  # fmt: skip

        try:
            run, self.description = load(options.n_best)
        except ValueError:
            if options.n_best != 1 or self.widest_beam() is not None:
                raise
            run, self.description = load(None)  # a SavedModel without `n_best`: no scores
            return lambda items: [[(text, None)] for text in run(items)]
        return lambda items: [[(h.text, float(h.score)) for h in row] for row in run(items)]


def _padded(translate):
    """`translate` of a batch padded to the next power of two with copies of its first
    item (the batcher's shortest), the copies' results dropped. XLA compiles a search
    program per batch size (seconds each), and a server's batches take any size under
    load, long after its warm-up: padded, they take a few (1, 2, 4, 8, ...), as the
    search's own batch does when finished sentences leave it. A translation does not
    depend on its batch mates, so the copies change the speed only.

    >>> _padded(lambda items: [len(items)] * len(items))(["a", "b", "c"])
    [4, 4, 4]
    """

    def translate_padded(items):
        size = 1 << (len(items) - 1).bit_length() if items else 0
        return list(translate([*items, *[items[0]] * (size - len(items))]))[: len(items)]

    return translate_padded


def _token_direction(codes, kind, own):
    """`TokenDirections`' `direction(source, target, where)` of an imported M2M-100 /
    NLLB run: the `language_tokens` pair (`targets.run_direction`'s) of `source` into
    `target` (None each: the run's own, `own`), None for the run's own direction; an
    unknown code refused as `targets.language_code` says, naming the field (`where`)."""
    from tfblocks.translation.targets import language_code

    def direction(source, target, where):
        pair = (
            own[0] if source is None else language_code(codes, kind, source, where[0]),
            own[1] if target is None else int(codes[language_code(codes, kind, target, where[1])]),
        )
        return None if pair == own else pair

    return direction


def run():
    """The console entry point of `tfblocks-serve`."""
    run_command("tfblocks-serve", main)


if __name__ == "__main__":
    run()
