"""Suite-wide test settings.

Hypothesis explores new random examples on every local run (and keeps the failures it finds in
.hypothesis/); under CI (``CI=true``) it runs derandomized, so a submission's result does not
depend on the luck of the draw.
"""

import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")


def pytest_configure(config):
    """Caches go to a directory of this test session, never the user's ~/.cache: the judge's verdict
    cache (``AGENTRL_CACHE_DIR``), the env's (``AGENTRL_CACHE``) and every other XDG cache;
    subprocesses inherit it. Tests that need a cache of their own still pass their own paths."""
    import tempfile

    if "AGENTRL_TEST_CACHE" not in os.environ:
        base = tempfile.mkdtemp(prefix="agentrl-test-cache-")
        os.environ["AGENTRL_TEST_CACHE"] = base
        os.environ.setdefault("AGENTRL_CACHE_DIR", os.path.join(base, "agentrl"))
        os.environ["AGENTRL_CACHE"] = os.path.join(base, "env")  # the env's sandbox and tool caches
        os.environ["XDG_CACHE_HOME"] = os.path.join(base, "xdg")
