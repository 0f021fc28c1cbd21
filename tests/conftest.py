"""Suite-wide settings: offline, headless, one torch thread, a throw-away build cache.

Tiny models run faster on one thread than on two competing ones on a 2-core machine. The fused CPU
kernels (`cpu_kernels`) compile into a temporary folder, not the user's cache.
"""

import os
import shutil
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("MUJOCO_GL", "egl")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
_BUILD_CACHE = None
if "COSMOS3_ROBOT_CACHE" not in os.environ:
    _BUILD_CACHE = os.environ["COSMOS3_ROBOT_CACHE"] = tempfile.mkdtemp(prefix="cosmos3-robot-test-cache-")

import pytest  # noqa: E402
import torch  # noqa: E402


@pytest.fixture(autouse=True, scope="session")
def _one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def pytest_sessionfinish(session, exitstatus):
    if _BUILD_CACHE is not None:
        shutil.rmtree(_BUILD_CACHE, ignore_errors=True)
