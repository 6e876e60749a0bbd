"""Every message round-trips at every version it supports (random, valid messages)."""
import pytest
from hypothesis import HealthCheck, given, settings
import hypothesis.strategies as st

import groupcoord.protocol as P
from schema_strategies import SPECS, all_message_versions, message_strategy

CASES = all_message_versions()


@pytest.mark.parametrize("name,version", CASES, ids=["%s-v%d" % c for c in CASES])
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_roundtrip(name, version, data):
    msg = data.draw(message_strategy(name, version))
    cls = type(msg)
    body = P.encode(msg, version)
    back = P.decode(cls, body, version)
    assert back == msg
    assert P.encode(back, version) == body


def test_every_api_of_the_scope_is_registered():
    want = {0: (3, 11), 1: (4, 16), 2: (1, 9), 3: (0, 13), 8: (2, 9), 9: (1, 9), 10: (0, 6),
            11: (0, 9), 12: (0, 4), 13: (0, 5), 14: (0, 5), 15: (0, 6), 16: (0, 5),
            17: (0, 1), 18: (0, 4), 19: (2, 7), 20: (1, 6), 29: (1, 3), 30: (1, 3),
            31: (1, 3), 32: (1, 4), 36: (0, 2), 37: (0, 3), 42: (0, 2),
            44: (0, 1), 47: (0, 0), 50: (0, 0), 51: (0, 0), 60: (0, 2), 68: (0, 1),
            69: (0, 1), 10000: (0, 0), 10001: (0, 0),
            10002: (0, 0), 10003: (0, 0)}
    assert P.supported_versions() == want


def test_default_messages_roundtrip_at_every_version():
    for name, version in CASES:
        cls = getattr(P.messages, name)
        msg = cls()
        assert P.decode(cls, P.encode(msg, version), version) == msg, (name, version)
