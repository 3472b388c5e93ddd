"""`tfblocks.serving.http.batching.Batcher` without a model: what it gathers into one call,
what it keeps apart, and whom an error reaches."""

import asyncio

import pytest

from tfblocks.serving.http.batching import Batcher, QueueFullError


def _batcher(calls, max_queue=16, fail_on=None):
    def translate_for(options):
        def translate(items):
            calls.append((options, list(items)))
            if fail_on in items:
                raise ValueError(f"refused {fail_on!r}")
            return [f"{options}:{item}" for item in items]

        return translate

    batcher = Batcher(translate_for, max_batch_tokens=64, max_wait_s=0.2, max_queue=max_queue)
    batcher.start()
    return batcher


def test_concurrent_requests_of_the_same_options_share_one_call():
    calls = []
    batcher = _batcher(calls, fail_on="bad")

    async def clients():
        return await asyncio.gather(
            batcher.submit("a", ["one", "two"], timeout=10),
            batcher.submit("b", ["three"], timeout=10),
            batcher.submit("a", ["four"], timeout=10),
            batcher.submit("a", ["bad"], timeout=10),
            return_exceptions=True,
        )

    got = asyncio.run(clients())
    batcher.stop()
    assert got[:3] == [["a:one", "a:two"], ["b:three"], ["a:four"]]
    assert isinstance(got[3], ValueError) and "refused 'bad'" in str(got[3])
    # One call for the three requests of options "a" (sorted by length), which failed
    # for "bad", then one call each; one call for "b".
    assert sorted(calls[0][1]) == ["bad", "four", "one", "two"] and calls[0][0] == "a"
    assert ("b", ["three"]) in calls and ("a", ["four"]) in calls and ("a", ["bad"]) in calls


def test_a_full_queue_is_refused_and_a_timeout_drops_the_request():
    calls = []
    batcher = _batcher(calls, max_queue=1)
    batcher.max_wait_s = 5  # the first request waits in the queue

    async def clients():
        first = asyncio.ensure_future(batcher.submit("a", ["x"], timeout=0.3))
        await asyncio.sleep(0.05)
        with pytest.raises(QueueFullError, match="1 requests are waiting"):
            await batcher.submit("a", ["y"], timeout=10)
        with pytest.raises(TimeoutError):
            await first

    asyncio.run(clients())
    assert batcher.queue_length() == 0
    batcher.stop()
    assert calls == []  # the request that timed out was never translated
