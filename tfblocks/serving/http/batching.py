"""`Batcher`: dynamic batching of the requests of concurrent clients, one worker thread.

A request (its texts and the options of their translation) waits in a bounded queue. The
worker thread takes the oldest request and gathers the waiting requests of the same
options behind it until their estimated subwords reach `max_batch_tokens` or the oldest
has waited `max_wait_s`, translates their texts in one call (in chunks of at most
`max_batch_tokens`, sorted by length, as `tfblocks-translate` does), and answers each
request with its own results. Requests of other options (an n-best count, a target
prefix, constraints, a beam size) wait for a batch of their own: one call decodes with
one search. Translations do not depend on their batch mates (padding is masked), so
batching changes the speed only.

The worker is the only thread that runs the model: TensorFlow's calls are never made
from the server's event loop, which stays free to accept and answer requests.
"""

import asyncio
import collections
import threading
import time


class QueueFullError(Exception):
    """The queue holds `max_queue` requests already: the server answers 503."""


def estimated_tokens(item):
    """The subwords a text (or the text of a `(text, prefix, ...)` item) will likely make:
    its UTF-8 bytes / 4, plus one (EOS). A SentencePiece subword of English is about 4
    bytes, one of Japanese about one character (3 bytes), so the estimate holds across
    scripts without tokenizing on the event loop.

    >>> estimated_tokens("Today's lunch is curry."), estimated_tokens(("今日の昼食", ""))
    (6, 4)
    """
    text = item if isinstance(item, str) else item[0]
    return len(text.encode("utf-8")) // 4 + 1


class _Request:
    """One request waiting in the queue: its options, items, future and arrival time."""

    def __init__(self, options, items, loop, future):
        self.options, self.items, self.loop, self.future = options, items, loop, future
        self.tokens = sum(estimated_tokens(item) for item in items)
        self.arrived = time.monotonic()
        self.abandoned = False  # its client stopped waiting (the timeout): not translated

    def settle(self, result=None, error=None):
        """Answers the request's future from the worker thread (unless it was abandoned)."""

        def set_it():
            if not self.future.done():
                if error is None:
                    self.future.set_result(result)
                else:
                    self.future.set_exception(error)

        self.loop.call_soon_threadsafe(set_it)


class Batcher:
    """Gathers the requests of concurrent clients into batches that one worker thread
    translates (see the module docstring).

    Args:
        translate_for: `translate_for(options) -> translate`, called in the worker
            thread (it may load a model): `translate(items) -> results`, one result per
            item, in order. `options` is whatever `submit` was given (hashable).
        max_batch_tokens: the most estimated subwords (`estimated_tokens`) of one call;
            a request larger than it is translated alone, in several calls.
        max_wait_s: how long the oldest waiting request waits for others to join its
            batch.
        max_queue: the most requests waiting (not yet in a batch); one more raises
            `QueueFullError`.
        metrics: optional object with `batch(requests, texts)` and `queue(length)`.

    Example:

    >>> batcher = Batcher(lambda options: lambda items: [t.upper() for t in items],
    ...                   max_batch_tokens=64, max_wait_s=0.01, max_queue=8)
    >>> batcher.start()
    >>> asyncio.run(batcher.submit("plain", ["ab", "c"], timeout=10))
    ['AB', 'C']
    >>> batcher.stop()
    """

    def __init__(self, translate_for, max_batch_tokens, max_wait_s, max_queue, metrics=None):
        self.translate_for = translate_for
        self.max_batch_tokens = max_batch_tokens
        self.max_wait_s = max_wait_s
        self.max_queue = max_queue
        self.metrics = metrics
        self.ready = threading.Event()  # set once `warm_up` has run
        self.failure = None  # the exception `warm_up` raised, if it did
        self._pending = collections.deque()
        self._condition = threading.Condition()
        self._stopping = False
        self._thread = None

    def start(self, warm_up=None, on_failure=None):
        """Starts the worker thread: it first runs `warm_up()` (load the model, translate
        a line), then sets `ready` and takes requests. When `warm_up` raises, `failure`
        holds the exception, `on_failure(error)` is called and the worker ends."""
        self._thread = threading.Thread(
            target=self._work, args=(warm_up, on_failure), name="tfblocks-serve-batcher",
            daemon=True,
        )  # fmt: skip
        self._thread.start()

    def stop(self, timeout=None):
        """Lets the worker translate what is waiting, then end; waits up to `timeout`
        seconds for it."""
        with self._condition:
            self._stopping = True
            self._condition.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)

    def queue_length(self):
        """The requests waiting for a batch."""
        with self._condition:
            return len(self._pending)

    async def submit(self, options, items, timeout):
        """The results of `items` translated with `options`, once their batch is done.

        Raises:
            QueueFullError: `max_queue` requests are waiting already.
            TimeoutError: no result within `timeout` seconds (the request is dropped
                from the queue if it is still there).
            Exception: what `translate_for` or `translate` raised for this request.
        """
        loop = asyncio.get_running_loop()
        request = _Request(options, list(items), loop, loop.create_future())
        with self._condition:
            if len(self._pending) >= self.max_queue:
                raise QueueFullError(f"{len(self._pending)} requests are waiting (--max-queue)")
            self._pending.append(request)
            self._queue_changed()
            self._condition.notify_all()
        try:
            return await asyncio.wait_for(request.future, timeout)
        except (TimeoutError, asyncio.TimeoutError):
            with self._condition:
                request.abandoned = True
                if request in self._pending:
                    self._pending.remove(request)
                    self._queue_changed()
            raise TimeoutError from None

    def _queue_changed(self):
        if self.metrics is not None:
            self.metrics.queue(len(self._pending))

    def _work(self, warm_up, on_failure):
        try:
            if warm_up is not None:
                warm_up()
        except Exception as error:  # reported by the caller, as one line
            self.failure = error
            if on_failure is not None:
                on_failure(error)
            return
        self.ready.set()
        while (batch := self._next_batch()) is not None:
            self._translate(batch)

    def _next_batch(self):
        """The next batch: the oldest request and those of its options behind it, once
        they fill `max_batch_tokens` or the oldest waited `max_wait_s`; None when stopping
        with nothing left."""
        with self._condition:
            while True:
                if not self._pending:
                    if self._stopping:
                        return None
                    self._condition.wait()
                    continue
                first = self._pending[0]
                chosen, full = [], False
                tokens = 0
                for request in self._pending:
                    if request.options != first.options:
                        continue
                    if chosen and tokens + request.tokens > self.max_batch_tokens:
                        full = True
                        break
                    chosen.append(request)
                    tokens += request.tokens
                full = full or tokens >= self.max_batch_tokens
                left = first.arrived + self.max_wait_s - time.monotonic()
                if full or left <= 0 or self._stopping:
                    for request in chosen:
                        self._pending.remove(request)
                    self._queue_changed()
                    return chosen
                self._condition.wait(left)

    def _translate(self, batch):
        """Translates the requests of `batch` in one go and answers each; when that
        fails with several requests, each is translated alone, so that the error (a
        refused constraint) reaches only the request that caused it."""
        items = [item for request in batch for item in request.items]
        try:
            translate = self.translate_for(batch[0].options)
            results = self._in_chunks(translate, items)
        except Exception as error:
            if len(batch) > 1:
                for request in batch:
                    self._translate([request])
                return
            batch[0].settle(error=error)
            return
        if self.metrics is not None:
            self.metrics.batch(len(batch), len(items))
        start = 0
        for request in batch:
            request.settle(results[start : start + len(request.items)])
            start += len(request.items)

    def _in_chunks(self, translate, items):
        """`translate` of `items` in calls of at most `max_batch_tokens` estimated
        subwords, in order of length (less padding), the results in the items' order."""
        order = sorted(range(len(items)), key=lambda i: estimated_tokens(items[i]))
        results = [None] * len(items)
        chunk, tokens = [], 0
        for index in [*order, None]:
            size = 0 if index is None else estimated_tokens(items[index])
            if chunk and (index is None or tokens + size > self.max_batch_tokens):
                out = list(translate([items[i] for i in chunk]))
                if len(out) != len(chunk):
                    raise ValueError(f"`translate` returned {len(out)} results for {len(chunk)}")
                for i, result in zip(chunk, out, strict=True):
                    results[i] = result
                chunk, tokens = [], 0
            if index is not None:
                chunk.append(index)
                tokens += size
        return results
