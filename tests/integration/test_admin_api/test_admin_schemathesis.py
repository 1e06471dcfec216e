"""schemathesis against the admin port's own ``/openapi.json`` on a real server: no request
it generates (valid or not, for every operation) gets a 5xx.

Bounded: a few examples per operation (``EXAMPLES``), so the whole run takes about a minute.
A 503 is allowed only where SieveMQ documents it (a failed health check, /readyz while
starting, the admin request budget); every other 5xx is a failure naming the request.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from sievemq.testing import ServerProcess

pytestmark = pytest.mark.timeout(600)

EXAMPLES = 8
AUTH = "Basic " + base64.b64encode(b"guest:guest").decode()
# 503 is part of these answers' contract (RabbitMQ's health checks answer 503 "failed")
MAY_503 = ("/api/health/checks/", "/readyz")


@pytest.fixture(scope="module")
def fuzzed_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    data: Path = tmp_path_factory.mktemp("schemathesis") / "data"
    with ServerProcess(data) as proc:
        yield proc
        assert proc.running, f"server died under schemathesis\n{proc.stderr()}"


def test_openapi_operations_never_answer_5xx(fuzzed_server: ServerProcess) -> None:
    schema = schemathesis.openapi.from_url(fuzzed_server.admin_url + "/openapi.json")
    failures: list[str] = []
    operations = 0
    calls = 0
    for result in schema.get_all_operations():
        operation = result.ok()
        operations += 1

        @settings(
            max_examples=EXAMPLES,
            deadline=None,
            database=None,
            derandomize=True,
            phases=[Phase.explicit, Phase.generate],
            suppress_health_check=list(HealthCheck),
        )
        @given(case=operation.as_strategy(), real_vhost=st.booleans())
        def run(case: schemathesis.Case, real_vhost: bool) -> None:
            if real_vhost and case.path_parameters and "vhost" in case.path_parameters:
                case.path_parameters["vhost"] = "/"  # else nearly every case is a 404
            response = case.call(base_url=fuzzed_server.admin_url, headers={"Authorization": AUTH})
            status = response.status_code
            nonlocal calls
            calls += 1
            allowed = status == 503 and case.path.startswith(MAY_503)
            if status >= 500 and not allowed:
                failures.append(
                    f"{case.method} {case.formatted_path} query={case.query!r} "
                    f"body={str(case.body)[:200]!r} -> {status} {response.text[:300]}"
                )

        run()
    assert operations > 50  # the whole management API was in the schema
    assert calls > 400, calls
    assert not failures, "\n".join(failures[:20])
