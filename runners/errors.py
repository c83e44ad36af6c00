"""Failures of the infrastructure under a launch (a node unreachable, a Ray node gone), as
opposed to failures of the system under test or faults of ppconf itself."""


class InfrastructureError(RuntimeError):
    pass
