"""SQL filter evaluation rate: compiled ``SqlFilter.evaluate`` calls per second, one core.

Three representative expressions (RabbitMQ's blog example, RocketMQ's tag filter, and a
richer one using properties, LIKE, arithmetic and NOT IN) over a rotating set of messages of
which some match and some do not. Prints one JSON document with the median of the runs.

    python -m bench.sql_eval [--repeats 3] [--n 500000]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time

from sievemq.filtering.sql import DictMessageView, compile_filter

EXPRESSIONS = {
    "region_and_amount": "region = 'emea' AND amount > 100",
    "tags_in": "TAGS IN ('TagA', 'TagB')",
    "rich": (
        "(p.priority BETWEEN 3 AND 7 OR [x-kind] LIKE 'ord%42') AND price * qty > 1000 "
        "AND status NOT IN ('void', 'held')"
    ),
}


def _messages() -> list[DictMessageView]:
    out = []
    for i in range(64):
        headers: dict[str, object] = {
            "region": ("emea", "apac", "amer")[i % 3],
            "amount": (i * 37) % 250,
            "x-kind": f"order-{i}2" if i % 2 else "refund",
            "price": 10 + i,
            "qty": i % 50,
            "status": ("open", "void", "paid", "held")[i % 4],
        }
        if i % 5 == 0:
            headers["amount"] = str(headers["amount"])  # RocketMQ-style string numbers
        out.append(
            DictMessageView(
                headers,
                {"priority": i % 10},
                tags=(("TagA", "TagB", "TagC", "TagD")[i % 4],),
                routing_key="r",
                exchange="e",
            )
        )
    return out


def _run(expr: str, messages: list[DictMessageView], n: int) -> tuple[float, float]:
    f = compile_filter(expr)
    evaluate = f.evaluate
    rounds = max(1, n // len(messages))
    matched = 0
    start = time.perf_counter()
    for _ in range(rounds):
        for m in messages:
            if evaluate(m):
                matched += 1
    elapsed = time.perf_counter() - start
    assert f.errors == 0
    total = rounds * len(messages)
    return total / elapsed, matched / total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--n", type=int, default=500_000, help="evaluations per run")
    args = parser.parse_args()
    messages = _messages()
    results = {}
    for name, expr in EXPRESSIONS.items():
        rates = []
        selectivity = 0.0
        for _ in range(args.repeats):
            rate, selectivity = _run(expr, messages, args.n)
            rates.append(rate)
        results[name] = {
            "expression": expr,
            "evaluations_per_s_median": round(statistics.median(rates)),
            "runs": [round(r) for r in rates],
            "matched_fraction": round(selectivity, 3),
        }
    print(
        json.dumps(
            {
                "benchmark": "sql_eval",
                "python": platform.python_version(),
                "cpus": os.cpu_count(),
                "loadavg_1m": os.getloadavg()[0],
                "evaluations_per_run": args.n,
                "results": results,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
