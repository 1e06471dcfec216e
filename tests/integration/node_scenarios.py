"""Running the Node.js client scenarios of tests/integration/data/node (installed by the
``node_modules`` fixture from the committed lock file)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

NODE_DIR = Path(__file__).resolve().parent / "data" / "node"


def run_node(script: str, cfg: dict[str, Any], timeout: float = 50) -> Any:
    """Run ``node <script> '<cfg as JSON>'``; the scenario's result is its last stdout line
    (JSON). A failing scenario fails the test with its stderr."""
    proc = subprocess.run(
        ["node", str(NODE_DIR / script), json.dumps(cfg)],
        cwd=NODE_DIR,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, f"node scenario {script} failed:\n{proc.stderr}"
    return json.loads(proc.stdout.strip().splitlines()[-1])
