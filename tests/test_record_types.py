"""Every coordinator record type names key/value schemas that exist, at the versions given."""
import groupcoord.protocol as P
from groupcoord.groups.record_types import RECORD_SCHEMAS, RecordType


def test_record_types_map_to_schemas():
    assert {int(t) for t in RecordType} >= {0, 1, 2, 3, 4, 5, 6, 7, 8, 100, 105}
    for rtype, (key, value, (lo, hi)) in RECORD_SCHEMAS.items():
        kcls, vcls = getattr(P.messages, key), getattr(P.messages, value)
        assert kcls.KIND == "data" and vcls.KIND == "data"
        assert vcls.VERSIONS == (lo, hi), rtype
        # the newest value version of every record encodes and decodes
        v = vcls()
        assert P.decode(vcls, P.encode(v, hi), hi) == v
