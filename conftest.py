# Load the plugin when the suite runs from a checkout without being installed. Installed, the
# pytest11 entry point (named like this module) registers it and this line is a no-op.
pytest_plugins = ["conformance.plugin"]
