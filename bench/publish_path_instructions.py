"""Instructions per published message through the server's real publish path, counted by
callgrind: a figure the machine's load does not move.

    python -m bench.publish_path_instructions [--n 2000] [--extra 20000] [--kinds identical,unique]
                                              [--trees HEAD,8c1ff56]

Why beside ``bench.publish_path``: on this project's shared 2-core machine the load average
runs from 2 to 20 while other work runs, and CPU time per message moves by 10 % from one run
to the next, more than the changes worth measuring (a 2-3 % regression). Valgrind's
callgrind counts the instructions the CPU would execute, the same under any load.

Each tree (``HEAD``, or any commit: ``git archive COMMIT src``) runs ``bench.publish_path``'s
``publish_run`` in a child under callgrind, twice, with ``--n`` and ``--n`` + ``--extra`` timed
messages; counting is on only inside the run (``--toggle-collect`` on ``itertools.starmap``'s
next, which the run is called through; the client's frames are built before it), and
instrumentation is switched on by ``callgrind_control`` after the imports (which would take
minutes under it). The difference
of the two counts over ``--extra`` is the instructions of one message: what both runs share (the
node's start, the warmup, the teardown) cancels out. Slow: a few minutes of CPU per tree
and kind. Needs ``valgrind`` (Debian's package: ``make valgrind``; ``make bench-instructions``
installs it and runs this) and a CPython with symbols (pyenv's has).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench._util import export_src, git_commit

ROOT = Path(__file__).resolve().parents[1]

# the child: warm up (imports, memo caches), say so, wait for instrumentation, run counted
_CHILD = """
import asyncio, functools, itertools, os, sys, time
from bench import publish_path
import sievemq.serve  # the imports publish_run makes, before counting
kind, n, flag = sys.argv[1], int(sys.argv[2]), sys.argv[3]
unique = kind == "unique"
# the client's frames built before counting (pamqp encodes each unique message)
publish_path.slices = functools.cache(publish_path.slices)
for count in (publish_path.WARMUP, n):
    publish_path.slices(count, 100, unique, 250)

def run(kind, n):
    asyncio.run(publish_path.publish_run(n, 100, unique, 250, 1, None))

run(kind, 1000)
open(flag + ".ready", "w").close()
while not os.path.exists(flag + ".go"):
    time.sleep(0.2)
list(itertools.starmap(run, [(kind, n)]))
"""


def counted(src: Path, kind: str, n: int, work: Path) -> int:
    """Instructions callgrind counted inside ``publish_run`` of ``n`` messages on ``src``."""
    flag = work / f"flag-{os.getpid()}-{time.monotonic_ns()}"
    script = work / "child.py"
    script.write_text(_CHILD)
    env = dict(os.environ, PYTHONPATH=f"{src}{os.pathsep}{ROOT}", PYTHONHASHSEED="0")
    argv = ["valgrind", "--tool=callgrind", "--instr-atstart=no", "--collect-atstart=no"]
    argv += ["--toggle-collect=starmap_next", f"--callgrind-out-file={work}/callgrind.out"]
    argv += [sys.executable, str(script), kind, str(n), str(flag)]
    child = subprocess.Popen(argv, env=env, cwd=ROOT, stderr=subprocess.PIPE, text=True)
    try:
        while not Path(f"{flag}.ready").exists():
            if child.poll() is not None:
                _, err = child.communicate()
                raise SystemExit(f"the child ended before counting: {err}")
            time.sleep(0.5)
        on = ["callgrind_control", "-i", "on", str(child.pid)]
        subprocess.run(on, check=True, capture_output=True)
        Path(f"{flag}.go").touch()
        _, err = child.communicate()
    finally:
        if child.poll() is None:
            child.kill()
    if child.returncode != 0:
        raise SystemExit(f"the child failed: {err}")
    found = re.search(r"Collected : (\d+)", err)
    if found is None:
        raise SystemExit(f"no count in callgrind's output: {err}")
    return int(found.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=2_000)
    parser.add_argument("--extra", type=int, default=20_000, help="the second run's more messages")
    parser.add_argument("--kinds", default="identical,unique")
    parser.add_argument(
        "--trees", default="HEAD", help="commits, comma-separated (HEAD: this tree)"
    )
    args = parser.parse_args()
    missing = [tool for tool in ("valgrind", "callgrind_control") if shutil.which(tool) is None]
    if missing:
        raise SystemExit(
            f"{' and '.join(missing)} not found: this count needs valgrind's callgrind "
            "(Debian's valgrind package: `make valgrind` installs it, `make bench-instructions` "
            "installs it and runs this)"
        )
    results: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="sievemq-instructions-") as tmp:
        work = Path(tmp)
        for tree in args.trees.split(","):
            src = ROOT / "src" if tree == "HEAD" else export_src(tree, work / tree)
            for kind in args.kinds.split(","):
                small = counted(src, kind, args.n, work)
                large = counted(src, kind, args.n + args.extra, work)
                results.setdefault(kind, {})[tree] = round((large - small) / args.extra)
    print(
        json.dumps(
            {
                "date": time.strftime("%Y-%m-%d"),
                "commit": git_commit(),
                "n": args.n,
                "instructions_per_msg": results,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
