"""Docker-only parts: limits, non-root, labels, the warm pool, content-hashed images (``gc``: test_gc.py)."""

import time

import pytest

from repogym.envs.sandbox import SandboxConfig, make_sandbox
from repogym.envs.sandbox.pool import SandboxPool
from tests.conftest import require_backend

pytestmark = pytest.mark.docker


@pytest.fixture
def docker_ready():
    require_backend("docker")
    from repogym.envs.sandbox.images import base_image_exists
    if not base_image_exists():
        pytest.fail("base image missing: run `repogym images build`")


def test_container_limits_user_and_labels(docker_ready):
    box = make_sandbox("docker", SandboxConfig(run_id="pytest-limits", memory="512m", pids=64))
    try:
        attrs = box.container.attrs
        assert attrs["HostConfig"]["NetworkMode"] == "none"
        assert attrs["HostConfig"]["Memory"] == 512 * 1024 * 1024 and attrs["HostConfig"]["PidsLimit"] == 64
        assert attrs["HostConfig"]["ReadonlyRootfs"] is True
        assert attrs["Config"]["Labels"]["repogym.run"] == "pytest-limits"
        assert box.run("id -u").stdout.strip() == "1000"
        assert box.run("touch /etc/x").exit_code != 0
    finally:
        box.close()


def test_pool_hands_out_started_sandboxes_and_refills(docker_ready):
    pool = SandboxPool(lambda: make_sandbox("docker", SandboxConfig(run_id="pytest-pool")), size=1)
    try:
        deadline = time.monotonic() + 60
        while pool._ready.empty() and time.monotonic() < deadline:
            time.sleep(0.1)
        start = time.monotonic()
        box = pool.acquire()
        assert time.monotonic() - start < 0.1  # it was warm
        assert box.run("echo ok").stdout == "ok\n"
        box.close()
    finally:
        pool.close()


def test_environment_images_are_content_hashed(docker_ready):
    from repogym.envs.sandbox.images import docker_image_tag_for
    assert docker_image_tag_for({}) == docker_image_tag_for({"source": "builtin:x"})
    assert docker_image_tag_for({}) != docker_image_tag_for({"pip": ["six==1.16.0"]})
