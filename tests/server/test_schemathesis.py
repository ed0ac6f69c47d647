"""Property-based fuzzing of the OpenAPI schema: no input may produce a 5xx."""

import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error

from suggestion_server.app import create_app
from tests.server.conftest import settings as server_settings

app = create_app(server_settings(max_nodes=200), background=False)
app.state.services.registry.load_all()  # the ASGI calls below do not run the lifespan; fuzz the model path too
# ... nor its first metrics refresh: without it /readyz answers 503 (not ready), as it should, until some
# fuzzed request happens to trigger a refresh first; mark it attempted so the fuzzing order does not matter
app.state.services.collector.attempted.set()
schema = schemathesis.openapi.from_asgi("/openapi.json", app)


@schemathesis.serializer("application/x-rlscore-names")
def _compact_body(ctx, value):
    """/v1/scores takes text (a JSON header line, then names): send what was generated as UTF-8."""
    return value if isinstance(value, bytes) else str(value).encode("utf-8", "surrogatepass")


@schema.parametrize()
@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
def test_no_server_errors(case):
    response = case.call()
    case.validate_response(response, checks=(not_a_server_error,))
