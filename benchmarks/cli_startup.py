"""Start-up of the console scripts: `--help` and an argument error, each in a fresh Python.

Every console script that setup.py installs (`tfblocks-train`, `tfblocks-translate`, ...)
runs as its installed script runs it (the program named NAME, `from MODULE import run;
sys.exit(run())`), once with `--help` (exit status 0, the usage on standard output) and
once with an unknown flag (exit status 2, `NAME: error: ...` on standard error), in a
new Python each time, ROUNDS times. The peers run in the same rounds, interleaved with
the commands: a bare Python (`python -c pass`, the floor) and `python -c "import
tfblocks"` (a library user's import: TensorFlow, Keras and keras-hub, which a command
loaded before it parsed its arguments). Prints per command and case the median and the
largest wall seconds, the median CPU seconds (user + system, the child's), and the ratio
of the library import's median to the command's. A run that exits otherwise than
expected is named, and the script exits with status 1.

Run:  python benchmarks/cli_startup.py                        # 10 rounds
      python benchmarks/cli_startup.py --repo /tmp/before     # another checkout's commands
      python benchmarks/cli_startup.py --quick                # 1 round, no library import

Its figures: `benchmarks/run_all.sh OUT_DIR cli_startup` (OUT_DIR/cli_startup.txt).
"""

import argparse
import os
import re
import resource
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# An entry of setup.py's console_scripts: "tfblocks-train=tfblocks.cli.train:run" (and the
# overview, "tfblocks=tfblocks.cli.overview:run").
ENTRY = re.compile(r'"(tfblocks(?:-[\w-]+)?)=([\w.]+):(\w+)"')
# What pip's script does, with the program's name where pip's script has its path.
SCRIPT = (
    "import sys\nsys.argv[0] = {path!r}\nfrom {module} import {function}\nsys.exit({function}())"
)
# case -> (arguments, exit status, where the output must show it: stream and text)
CASES = {
    "--help": (["--help"], 0, "stdout", "usage: {name} "),
    "error": (["--no-such-flag"], 2, "stderr", "{name}: error: "),
}
PEERS = {"python -c pass": "pass", "import tfblocks": "import tfblocks"}


def console_scripts(repo):
    """`[(name, module, function)]` of the console scripts in `repo`'s setup.py."""
    with open(os.path.join(repo, "setup.py"), encoding="utf-8") as file:
        found = ENTRY.findall(file.read())
    if not found:
        raise SystemExit(f"no tfblocks-* console_scripts entry in {repo}/setup.py")
    return found


def timed(code, args, repo):
    """`(wall seconds, CPU seconds, finished process)` of `python -c code args...`."""
    env = dict(os.environ, PYTHONPATH=repo)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True, text=True, env=env, timeout=300, check=False,
    )  # fmt: skip
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, result


def runs(repo, rounds, peers):
    """`{(row, case): {"wall": [...], "cpu": [...], "exit": [...], "failed": first bad
    process or None}}` over `rounds` rounds, each running every command's cases and
    the `peers` once, in turn."""
    bin_dir = os.path.dirname(sys.executable)
    jobs = []
    for name, module, function in console_scripts(repo):
        code = SCRIPT.format(path=os.path.join(bin_dir, name), module=module, function=function)
        for case, (args, status, stream, marker) in CASES.items():
            jobs.append(((name, case), code, args, status, stream, marker.format(name=name)))
    jobs += [((peer, "-"), PEERS[peer], [], 0, "stdout", "") for peer in peers]
    found = {job[0]: {"wall": [], "cpu": [], "exit": [], "failed": None} for job in jobs}
    for _ in range(rounds):
        for key, code, args, status, stream, marker in jobs:
            wall, cpu, result = timed(code, args, repo)
            row = found[key]
            row["wall"].append(wall)
            row["cpu"].append(cpu)
            row["exit"].append(result.returncode)
            expected = result.returncode == status and marker in getattr(result, stream)
            if not expected and row["failed"] is None:
                row["failed"] = result
    return found


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=10, help="runs of each command and case")
    parser.add_argument("--repo", default=HERE, help="the checkout whose commands run")
    parser.add_argument("--quick", action="store_true", help="1 round, no `import tfblocks`")
    args = parser.parse_args()
    rounds = 1 if args.quick else args.rounds
    peers = ["python -c pass"] + ([] if args.quick else ["import tfblocks"])
    load = os.getloadavg()
    print(f"repo {args.repo}; Python {sys.version.split()[0]}; {rounds} rounds")
    print(f"load average at the start {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    found = runs(args.repo, rounds, peers)
    library = found.get(("import tfblocks", "-"))
    print(
        f"{'command':<20} {'case':<7} {'exit':>4} {'as expected':>11} {'median s':>9} "
        f"{'max s':>7} {'CPU s':>7} {'import tfblocks / this':>22}"
    )
    for (row, case), times in found.items():
        failed = times["failed"]
        status = failed.returncode if failed else times["exit"][0]
        median = statistics.median(times["wall"])
        ratio = "-"
        if library is not None and row != "import tfblocks":
            ratio = f"{statistics.median(library['wall']) / median:.1f}×"
        print(
            f"{row:<20} {case:<7} {status:>4} {'no' if failed else 'yes':>11} {median:>9.3f} "
            f"{max(times['wall']):>7.3f} {statistics.median(times['cpu']):>7.3f} {ratio:>22}"
        )
    commands = {key: t for key, t in found.items() if key[0].startswith("tfblocks-")}
    slowest = max(commands, key=lambda key: statistics.median(commands[key]["wall"]))
    print(
        f"slowest command: {' '.join(slowest)}, median "
        f"{statistics.median(commands[slowest]['wall']):.3f} s; largest single run "
        f"{max(max(t['wall']) for t in commands.values()):.3f} s"
    )
    load = os.getloadavg()
    print(f"load average at the end {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    failures = [(key, t["failed"]) for key, t in found.items() if t["failed"] is not None]
    for (row, case), result in failures:
        print(
            f"{row} {case}: exit {result.returncode}\nstdout: {result.stdout[-1500:]}\n"
            f"stderr: {result.stderr[-1500:]}",
            file=sys.stderr,
        )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
