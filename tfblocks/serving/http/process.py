"""`ServerProcess`: a `tfblocks-serve` started as a child process, as a user starts it,
its log read as it comes: what the tests and `benchmarks/serve_load.py` talk HTTP to.

>>> ServerProcess.__name__
'ServerProcess'
"""

import re
import subprocess
import sys
import threading
import time


class ServerProcess:
    """`tfblocks-serve --model MODEL --port 0 ARGS...` in a child process (any free port,
    which its `listening on` line names: `url`, `host`, `port`).

    Args:
        model: the `--model` folder.
        *args: more command-line arguments.
        cwd: the child's working folder (None: this one's).

    Raises:
        RuntimeError: the server ended, or said nothing of `listening on` within
            `timeout` seconds (its log in the message).
    """

    def __init__(self, model, *args, cwd=None, timeout=120):
        command = [sys.executable, "-m", "tfblocks.cli.serve", "--model", str(model)]
        self.process = subprocess.Popen(
            [*command, "--port", "0", *map(str, args)], stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE, text=True, cwd=cwd,
        )  # fmt: skip
        self.lines, self.changed = [], threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()
        listening = self.wait_for(r"listening on (http://\S+);", timeout)
        self.url = re.search(r"listening on (http://\S+);", listening).group(1)
        self.host, self.port = re.search(r"http://\[?([^\]]+?)\]?:(\d+)$", self.url).groups()

    def _read(self):
        for line in self.process.stderr:
            with self.changed:
                self.lines.append(line)
                self.changed.notify_all()
        with self.changed:
            self.lines.append(None)  # the end
            self.changed.notify_all()

    def log(self):
        """What the server wrote on standard error so far."""
        return "".join(line for line in self.lines if line)

    def wait_for(self, pattern, timeout=120):
        """The first log line matching `pattern`, waiting up to `timeout` seconds (a
        RuntimeError, with the log's end, when the server ends or the time runs out)."""
        end = time.monotonic() + timeout
        with self.changed:
            while True:
                found = [line for line in self.lines if line and re.search(pattern, line)]
                if found:
                    return found[0]
                if None in self.lines:
                    raise RuntimeError(f"the server ended:\n{self.log()[-3000:]}")
                if time.monotonic() > end:
                    raise RuntimeError(f"no {pattern!r} in:\n{self.log()[-3000:]}")
                self.changed.wait(1)

    def ready(self, timeout=120):
        """Waits for the `ready on` line (the model loaded and warmed); returns self."""
        self.wait_for("ready on ", timeout)
        return self

    def stop(self, timeout=60):
        """Stops the server (SIGTERM: it answers what is in flight first); returns its
        exit status."""
        if self.process.poll() is None:
            self.process.terminate()
        status = self.process.wait(timeout)
        self.process.stderr.close()
        return status
