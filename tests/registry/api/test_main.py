"""registry/api/main.py: the app as created, its OpenAPI schema served and honoured."""

import httpx
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error

from tests.support.registry_server import TOKEN


def test_no_request_built_from_the_openapi_schema_gets_a_500(server):
    """Schemathesis generates requests for every operation from the server's own OpenAPI schema,
    authorised, so writes reach validation too: none may answer with a server error."""
    schema = schemathesis.openapi.from_url(f"{server}/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 14
    served = _requests_served(server)

    for operation in operations:

        @settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck), database=None)
        @given(case=operation.as_strategy())
        def no_server_error(case):
            case.call_and_validate(headers={"Authorization": f"Bearer {TOKEN}"}, checks=[not_a_server_error])

        no_server_error()
    assert _requests_served(server) - served >= 5 * len(operations)  # the requests did reach the server


def _requests_served(server: str) -> float:
    lines = httpx.get(f"{server}/metrics").text.splitlines()
    return sum(float(line.rsplit(" ", 1)[1]) for line in lines if line.startswith("tokmaint_registry_requests_total{"))
