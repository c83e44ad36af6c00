# The conformance plugin registers ppconf's options and markers for every test run from here.
pytest_plugins = ["conformance.plugin"]
