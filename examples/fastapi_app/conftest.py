import pytest


@pytest.fixture
def conveyor_queue_name() -> str:
    return "thumbnails"
