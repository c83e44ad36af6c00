# The conformance plugin registers ppconf's options and markers for every test run from here;
# tests.needs skips (or, in CI, fails) a test whose needs_* marker this machine does not meet.
pytest_plugins = ["conformance.plugin", "tests.needs"]
