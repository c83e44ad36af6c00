"""Checks of a stacked feature on a live deployment, named in the matrix (``Feature.checks``).

A feature names the checks it needs. Each live check is one module here whose ``CHECK`` takes the
``LiveDeployment`` and answers ``{"ok": bool, "detail": str}`` (a failure is evidence, never an
exception), and one line in ``harness.registry.LIVE_CHECKS``, whose names the schema's
``FEATURE_CHECKS`` takes. ``embeddings`` is not run here: it makes the case's requests
embeddings, compared by cosine (``Matrix.pools``).
"""
