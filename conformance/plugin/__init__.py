"""The pytest plugin, one module a job: options, profiles and markers (options); the matrix's
parameters and xdist groups (collection); the worlds and the cell fixtures (fixtures); the
results, the reports and the gate (results). What they share is in shared.

Registered through the `pytest11` entry point, and by the checkout's conftest.py. Results
travel from xdist workers to the controller on each report's user_properties (plain built-in
types only) and are written once, by the controller, at the end of the session.
"""

# results first: options imports it, and a plugin module pytest imports after another module
# imported it cannot be rewritten (PytestAssertRewriteWarning under the `pytest` script)
pytest_plugins = [
    "conformance.plugin.results",
    "conformance.plugin.options",
    "conformance.plugin.collection",
    "conformance.plugin.fixtures",
]
