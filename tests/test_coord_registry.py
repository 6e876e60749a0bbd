"""protocol/api_keys.py names every API key once: each constant is its request schema's name
in UPPER_SNAKE case with the schema's apiKey, and every request schema has its constant. The
registry and the runtime's routing use exactly the coordinator's keys."""
import os
import re

from groupcoord.codegen.schema import load_all
from groupcoord.groups import registry
from groupcoord.protocol import api_keys as K
from groupcoord.runtime import shards as rt

SCHEMAS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                       "src", "groupcoord", "protocol", "schemas")


def _snake(request_name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", request_name[:-len("Request")]).upper()


def _constants() -> dict:
    return {k: v for k, v in vars(K).items() if k.isupper() and isinstance(v, int)}


def test_every_constant_is_its_schema_and_every_schema_has_one():
    from_schemas = {_snake(s.name): s.api_key for s in load_all(SCHEMAS).values()
                    if s.type == "request"}
    assert from_schemas, "no request schema found"
    assert _constants() == from_schemas


def test_no_key_is_named_twice():
    values = list(_constants().values())
    assert len(values) == len(set(values))


def test_runtime_routes_exactly_the_registered_handlers():
    assert rt.GROUP_APIS == frozenset(registry.API_HANDLERS)
    assert not set(rt.SINGLE_GROUP_APIS) & set(rt.MULTI_GROUP_APIS)


def test_every_record_type_and_volatile_event_has_a_replayer():
    from groupcoord.groups.record_types import RecordType
    from groupcoord.groups.result import Volatile

    def subclasses(cls):
        for c in cls.__subclasses__():
            yield c
            yield from subclasses(c)
    assert set(RecordType) <= set(registry.REPLAYERS)
    events = {c for c in subclasses(Volatile) if c.__module__.startswith("groupcoord.")}
    assert events and events <= set(registry.REPLAYERS)

