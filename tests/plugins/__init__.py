"""Members of the pluggable kinds that only tests register (``tests/test_registries.py``)."""
