"""Explicit requests on a live deployment: how each endpoint's request is sent and how its answer
is compared with the reference's answer to the same request; ``endpoint.py`` says what an
endpoint provides, ``harness.registry.ENDPOINTS`` names them."""
