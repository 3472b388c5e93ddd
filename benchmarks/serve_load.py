"""Load test of `tfblocks-serve`: throughput and latency at 1, 8 and 32 concurrent clients,
against the same model's `Translator` called directly.

Starts `tfblocks-serve --model MODEL --port 0` in a process of its own, as a user runs it,
and sends it the first `--sentences` small_parallel_enja test sentences in the model's
source language (`run.json`'s; Japanese raw, its spaces removed: `--data`), one sentence a
request, in LibreTranslate's shape (`POST /translate`, JSON):

- `server`, C clients (`--clients`, default 1 8 32): C client threads, each sending its next
  sentence as soon as its last one was answered (a closed loop), until every sentence was
  sent once; 1 client is the sentences sent one at a time. sentences/s: sentences / wall
  time of the pass; p50 / p95: the latency of a request, from sending it to reading its
  answer; batch: the mean requests a batch of the server answered (its `/metrics`).
- `direct`, batch B: the model loaded in this process as the server loads it
  (`tfblocks.translation.engines.load_translate`: the same preset, search, beam and
  max_length), called on the sentences in batches of B = each C in order, then on all of
  them in one call: the time of the batch itself, without HTTP, queue or waiting. A
  sentence's latency is its batch's time.

Then the goal of issue 69: at the most clients, at least 4x the sentences/s of one at a
time, and a p95 latency within 2x the time of a direct batch of as many sentences. `same`
is the share of the server's translations equal to the direct one-batch call's (batching
changes the speed only, unless a float's last bit turns a beam).

XLA compiles a program per batch size and source length bucket, so every timed pass is
preceded by `--warmup` untimed passes of the same kind; a server's batch sizes still vary
with the arrivals, and a size met first in a timed pass is compiled there (the p95 shows it).

The clients are threads over `http.client` (one keep-alive connection each), not a load
tool such as locust: every concurrency sends the same fixed sentences, so its throughput
compares with one at a time and with the direct calls exactly; each request's latency is
kept exactly (not in a histogram's buckets); and nothing more is installed. A thread waiting
on its socket costs little, but the clients run on the server's machine (2 cores here):
the figures include their share of it.

`--quick`: the smoke run of tests/benchmarks: the tiny Marian model of tests/data (beam
2), 16 built-in sentences, 1 and 4 clients.
"""

import argparse
import http.client
import json
import os
import re
import sys
import tempfile
import threading
import time

import numpy as np

from tfblocks.serving.http.process import ServerProcess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(os.path.dirname(ROOT), "shared", "data", "small_parallel_enja")
MARIAN = os.path.join(ROOT, "tests", "data", "marian", "shared")
QUICK_SENTENCES = [
    "the cat sleeps!", "the dog sits in the garden!", "a small cat!", "the cat sits!",
    "a dog sleeps in the garden!", "the small dog!", "a cat sits in the garden!", "the dog!",
    "the garden!", "a small garden!", "the cat sleeps in the garden!", "a dog sits!",
    "the small cat sleeps!", "a garden!", "the dog sleeps!", "a small dog sits!",
]  # fmt: skip
# The goal of issue 69: throughput at the most clients over one at a time, at least; p95
# latency over a direct batch's time, at most.
GOAL_SPEEDUP, GOAL_P95 = 4.0, 2.0


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", help="the run folder (or preset) to serve; not with --quick")
    parser.add_argument("--data", default=DATA, help="the small_parallel_enja directory")
    parser.add_argument("--sentences", type=int, default=256, help="test sentences sent")
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 8, 32],
                        help="concurrent clients of each pass (default 1 8 32)")  # fmt: skip
    parser.add_argument("--warmup", type=int, default=1,
                        help="untimed passes before each timed one (XLA compiles)")  # fmt: skip
    parser.add_argument("--beam-size", type=int, help="the server's and the direct beam")
    parser.add_argument("--max-wait-ms", type=int, help="tfblocks-serve's (default its own)")
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: tests/data's tiny Marian model, 16 sentences, 1 and 4 "
                        "clients")  # fmt: skip
    args = parser.parse_args(argv)
    if args.quick:
        args.sentences, args.clients = len(QUICK_SENTENCES), [1, 4]
    elif args.model is None:
        parser.error("--model is required (a run folder: examples/translate.py --output DIR)")
    for flag in ("sentences", "warmup", "beam_size", "max_wait_ms"):
        value = getattr(args, flag)
        if value is not None and value < (0 if flag in ("warmup", "max_wait_ms") else 1):
            parser.error(f"--{flag.replace('_', '-')} must be positive, got {value}")
    if min(args.clients) < 1:
        parser.error(f"--clients must be positive, got {args.clients}")
    return args


def quick_model(folder):
    """A run folder of tests/data's tiny Marian model (en->de, beam 2, max_length 12)."""
    import dataclasses

    from tfblocks.models import save_preset
    from tfblocks.models.marian import import_marian

    model, source, target, hp, _ = import_marian(MARIAN)[:5]
    save_preset(model, source, os.path.join(folder, "model"),
                dataclasses.replace(hp, max_length=12), target)  # fmt: skip
    settings = {"source_lang": "en", "target_lang": "de", "beam_size": 2}
    with open(os.path.join(folder, "run.json"), "w", encoding="utf-8") as f:
        json.dump({"format": 1, "settings": settings}, f)
    return folder


def read_sentences(args, source_lang):
    """The first `--sentences` test sentences in `source_lang` (raw Japanese for ja)."""
    if args.quick:
        return list(QUICK_SENTENCES)
    path = os.path.join(args.data, f"test.{source_lang}")
    if not os.path.isfile(path):
        sys.exit(f"--data={args.data!r} has no test.{source_lang} (small_parallel_enja's)")
    with open(path, encoding="utf-8") as f:
        lines = [line.strip() for line in f if line.strip()][: args.sentences]
    return [line.replace(" ", "") if source_lang == "ja" else line for line in lines]


class Server(ServerProcess):
    """`tfblocks-serve` on a free port (`ServerProcess`), with the load test's reads."""

    def __init__(self, model, flags):
        try:
            super().__init__(model, *flags, cwd=ROOT, timeout=600)
        except RuntimeError as error:
            sys.exit(f"tfblocks-serve: {error}")

    def get(self, path):
        connection = http.client.HTTPConnection(self.host, int(self.port), timeout=60)
        connection.request("GET", path)
        return connection.getresponse().read().decode("utf-8")

    def batches(self):
        """(batches, requests answered by them) so far, from `/metrics`."""
        text = self.get("/metrics")
        count = re.search(r"^tfblocks_serve_batch_requests_count (\S+)$", text, re.M)
        total = re.search(r"^tfblocks_serve_batch_requests_sum (\S+)$", text, re.M)
        return float(count.group(1)), float(total.group(1))

    def stop(self):
        status = super().stop(120)
        if status != 0:
            print(f"tfblocks-serve exited {status}", file=sys.stderr)


def load_pass(server, sentences, clients, languages):
    """`(seconds, latencies, translations)` of sending every sentence once from `clients`
    client threads, one sentence a request."""
    order, lock = iter(range(len(sentences))), threading.Lock()
    latencies, out, errors = [None] * len(sentences), [None] * len(sentences), []
    source, target = languages

    def client():
        connection = http.client.HTTPConnection(server.host, int(server.port), timeout=300)
        while True:
            with lock:
                index = next(order, None)
            if index is None:
                break
            body = json.dumps({"q": sentences[index], "source": source, "target": target})
            start = time.perf_counter()
            connection.request("POST", "/translate", body, {"Content-Type": "application/json"})
            response = connection.getresponse()
            answer = response.read()
            latencies[index] = time.perf_counter() - start
            if response.status != 200:
                errors.append(f"{response.status} {answer[:300]!r}")
                break
            out[index] = json.loads(answer)["translatedText"]
        connection.close()

    threads = [threading.Thread(target=client) for _ in range(clients)]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    seconds = time.perf_counter() - start
    if errors:
        sys.exit(f"tfblocks-serve answered {errors[0]}")
    return seconds, latencies, out


def direct_pass(translate, sentences, batch):
    """`(seconds, latencies, translations)` of `translate` called on `sentences` in
    batches of `batch` (a sentence's latency: its batch's time)."""
    latencies, out, total = [], [], 0.0
    for start in range(0, len(sentences), batch):
        chunk = sentences[start : start + batch]
        began = time.perf_counter()
        rows = translate(chunk)
        took = time.perf_counter() - began
        total += took
        latencies += [took] * len(chunk)
        out += [row[0].text for row in rows]
    return total, latencies, out


def row(mode, size, seconds, latencies, count, single=None, batch=""):
    rate = count / seconds
    ratio = "" if single is None else f"{rate / single:.2f}×"
    p50, p95 = (np.percentile(latencies, q) * 1e3 for q in (50, 95))
    print(f"| {mode} | {size} | {rate:.1f} | {ratio} | {p50:.1f} | {p95:.1f} | {batch} |",
          flush=True)  # fmt: skip
    return rate, p95


def main(argv=None):
    args = parse_args(argv)
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    scratch = tempfile.TemporaryDirectory(prefix="serve_load-")
    model = quick_model(scratch.name) if args.quick else args.model
    from tfblocks.translation.run_folder import run_languages

    languages = run_languages(model) or ("auto", "xx")
    sentences = read_sentences(args, languages[0])
    flags = []
    for flag, value in (("--beam-size", args.beam_size), ("--max-wait-ms", args.max_wait_ms)):
        flags += [] if value is None else [flag, str(value)]
    print(f"# start {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}, load "
          f"{' '.join(f'{v:.2f}' for v in os.getloadavg())}; {os.cpu_count()} CPUs")  # fmt: skip
    began = time.perf_counter()
    server = Server(model, flags)
    try:
        ready = re.search(r"\((.*)\)$", server.wait_for(r"ready on ", 600).strip()).group(1)
        print(f"tfblocks-serve {' '.join(flags) or '(defaults)'}: ready in "
              f"{time.perf_counter() - began:.1f} s, {ready}")  # fmt: skip
        from tfblocks.translation import engines

        translate, what = engines.load_translate(model, args.beam_size, n_best=1)
        print(f"direct: {what}; {len(sentences)} sentences {languages[0]}->{languages[1]}, "
              f"one a request")  # fmt: skip
        print("\n| mode | clients / batch | sentences/s | × one at a time | p50 ms | p95 ms | "
              "requests a batch |\n|---|---|---|---|---|---|---|")  # fmt: skip
        direct_times = {}
        for batch in [*args.clients, len(sentences)]:
            for _ in range(args.warmup):
                direct_pass(translate, sentences, batch)
            seconds, latencies, out = direct_pass(translate, sentences, batch)
            size = "all in one" if batch == len(sentences) else batch
            row("direct", size, seconds, latencies, len(sentences))
            direct_times[batch] = float(np.median(latencies))
        reference = out  # the one-batch call's translations
        single, results = None, {}
        for clients in args.clients:
            for _ in range(args.warmup):
                load_pass(server, sentences, clients, languages)
            before = server.batches()
            seconds, latencies, out = load_pass(server, sentences, clients, languages)
            after = server.batches()
            per_batch = (after[1] - before[1]) / max(after[0] - before[0], 1)
            rate = len(sentences) / seconds
            single = rate if single is None else single
            results[clients] = row("server", clients, seconds, latencies, len(sentences),
                                   single, f"{per_batch:.1f}")  # fmt: skip
            same = sum(a == b for a, b in zip(out, reference, strict=True)) / len(out)
            results[clients] += (same,)
        most = max(args.clients)
        rate, p95, same = results[most]
        speedup, over = rate / single, p95 / 1e3 / direct_times[most]
        print("\nserver's translations equal to the direct call's: "
              + ", ".join(f"{c} clients {results[c][2]:.1%}" for c in args.clients))  # fmt: skip
        print(f"goal at {most} clients: {speedup:.2f}× one at a time (≥ {GOAL_SPEEDUP:g}×: "
              f"{'met' if speedup >= GOAL_SPEEDUP else 'not met'}); p95 {p95:.1f} ms = "
              f"{over:.2f}× a direct batch of {most} ({direct_times[most] * 1e3:.1f} ms; "
              f"≤ {GOAL_P95:g}×: {'met' if over <= GOAL_P95 else 'not met'})")  # fmt: skip
    finally:
        server.stop()
        scratch.cleanup()
    print(f"# end {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}, load "
          f"{' '.join(f'{v:.2f}' for v in os.getloadavg())}")  # fmt: skip


if __name__ == "__main__":
    main()
