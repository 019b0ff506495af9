"""``inputdp.core``: the types every package of the suite imports, and which import none of them: the run's
configuration and privacy budget (``config``), the calibrated noise and the privacy claim (``claims``), the one-line
errors (``errors``), the plug-in registries (``registry``) and the names a run is stored under (``names``).

It lives in ``benchmarks/core/`` (the repository's top level is fixed) but is its own package, so that methods and
data sets can import these types without importing the harness: tests/test_architecture.py checks that no package
imports back into one that imports it."""
