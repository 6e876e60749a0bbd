import pytest


@pytest.fixture
def coord():
    """Factory of coordinator test harnesses (tests/coord_harness.py). At teardown every
    harness made is checked for replay equality: a shard rebuilt from the durable records
    equals the live one."""
    from coord_harness import Harness
    made = []

    def make(**kw):
        h = Harness(**kw)
        made.append(h)
        return h

    yield make
    for h in made:
        h.check_replay()
