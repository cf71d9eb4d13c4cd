"""The slowest tests of a `scripts/test` run: reads the logs given (libtest's
`test NAME ... ok <1.234s>` lines from scripts/lib/cargo-test-timed, node's TAP
`ok N - NAME` with its `duration_ms`) and prints the ten slowest, in seconds."""
import re
import sys

RUST = re.compile(r"^test (\S+) \.\.\. \w+ <([0-9.]+)s>")
TAP_OK = re.compile(r"^\s*(?:not )?ok \d+ - (.+?)(?: # .*)?$")
TAP_MS = re.compile(r"^\s*duration_ms: ([0-9.]+)")


def times(path):
    name = None
    with open(path, errors="replace") as f:
        for line in f:
            m = RUST.match(line)
            if m:
                yield float(m.group(2)), m.group(1)
                continue
            m = TAP_OK.match(line)
            if m:
                # A test file's own line (its path) times the whole file: not a test.
                name = None if m.group(1).endswith((".mjs", ".js")) else m.group(1)
                continue
            m = TAP_MS.match(line)
            if m and name:
                yield float(m.group(1)) / 1000, f"{name} ({path.rsplit('/', 1)[-1]})"
                name = None


def main(paths, n=10):
    found = []
    for p in paths:
        try:
            found.extend(times(p))
        except FileNotFoundError:
            pass
    found.sort(reverse=True)
    print(f"the {min(n, len(found))} slowest of {len(found)} timed tests:")
    for secs, name in found[:n]:
        print(f"  {secs:8.1f} s  {name}")


if __name__ == "__main__":
    main(sys.argv[1:])
