"""`Metrics`: what `GET /metrics` reports, in Prometheus' text format (`prometheus_client`),
from a registry of the server's own (not the process-wide default one, so that several
apps in one process, as in tests, count apart)."""

import prometheus_client

# Bounds of the histograms: texts (and requests) per batch, seconds per request.
SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
SECONDS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


class Metrics:
    """The server's counters: requests by path and status, batch sizes (texts and
    requests), the queue's length and the requests' latency.

    Example:

    >>> metrics = Metrics()
    >>> metrics.batch(requests=3, texts=5)
    >>> b"tfblocks_serve_batch_texts_sum 5.0" in metrics.text()
    True
    """

    def __init__(self):
        self.registry = prometheus_client.CollectorRegistry(auto_describe=True)
        self.requests = prometheus_client.Counter(
            "tfblocks_serve_requests", "HTTP requests answered, by path and status",
            ["path", "status"], registry=self.registry,
        )  # fmt: skip
        self.batch_texts = prometheus_client.Histogram(
            "tfblocks_serve_batch_texts", "texts translated in one batch", buckets=SIZES,
            registry=self.registry,
        )  # fmt: skip
        self.batch_requests = prometheus_client.Histogram(
            "tfblocks_serve_batch_requests", "requests answered by one batch", buckets=SIZES,
            registry=self.registry,
        )  # fmt: skip
        self.queue_length = prometheus_client.Gauge(
            "tfblocks_serve_queue_length", "requests waiting for a batch", registry=self.registry
        )
        self.latency = prometheus_client.Histogram(
            "tfblocks_serve_request_seconds", "seconds from a translation request to its answer",
            ["path"], buckets=SECONDS, registry=self.registry,
        )  # fmt: skip

    def batch(self, requests, texts):
        """Counts a batch of `requests` holding `texts` texts (`Batcher`'s hook)."""
        self.batch_requests.observe(requests)
        self.batch_texts.observe(texts)

    def queue(self, length):
        """Sets the queue's length (`Batcher`'s hook)."""
        self.queue_length.set(length)

    def answered(self, path, status):
        """Counts a request to `path` answered with `status`."""
        self.requests.labels(path, str(status)).inc()

    def text(self):
        """The metrics in Prometheus' text format (bytes)."""
        return prometheus_client.generate_latest(self.registry)


# The content type of `Metrics.text()`.
CONTENT_TYPE = prometheus_client.CONTENT_TYPE_LATEST
