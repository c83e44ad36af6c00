# tests.needs skips (or, in CI, fails) a test whose needs_* marker this machine does not meet.
pytest_plugins = ["tests.needs"]


def pytest_addoption(parser, pluginmanager):
    """The conformance plugin (ppconf's options, markers and items) comes from its `pytest11` entry
    point where ppconf is installed; register it here only when that did not happen (an install
    made before the entry point existed, or plugin autoloading turned off). Naming it in
    pytest_plugins instead would register the module twice, which pytest refuses; `-p no:ppconf`
    is respected either way."""
    if not pluginmanager.has_plugin("ppconf") and not pluginmanager.is_blocked("ppconf"):
        import conformance.plugin

        pluginmanager.register(conformance.plugin, "ppconf")
