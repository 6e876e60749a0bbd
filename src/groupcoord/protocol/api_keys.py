"""Every API key this project speaks, named once.

The numbers come from the request schemas (protocol/schemas/*Request.json, "apiKey");
tests/test_api_keys.py checks that each name here is its schema's request name in
UPPER_SNAKE case with the same number, and that every request schema has its name here.
Keys 0-69 are Kafka's; 10000-10003 are this project's connect group APIs, which Kafka does
not define. Plain ints: these are dict keys on the request path.
"""

PRODUCE = 0
FETCH = 1
LIST_OFFSETS = 2
METADATA = 3
OFFSET_COMMIT = 8
OFFSET_FETCH = 9
FIND_COORDINATOR = 10
JOIN_GROUP = 11
HEARTBEAT = 12
LEAVE_GROUP = 13
SYNC_GROUP = 14
DESCRIBE_GROUPS = 15
LIST_GROUPS = 16
API_VERSIONS = 18
CREATE_TOPICS = 19
DELETE_TOPICS = 20
DESCRIBE_CONFIGS = 32
CREATE_PARTITIONS = 37
DELETE_GROUPS = 42
INCREMENTAL_ALTER_CONFIGS = 44
OFFSET_DELETE = 47
DESCRIBE_CLUSTER = 60
CONSUMER_GROUP_HEARTBEAT = 68
CONSUMER_GROUP_DESCRIBE = 69
CONNECT_GROUP_HEARTBEAT = 10000
CONNECT_GROUP_PREPARE_ASSIGNMENT = 10001
CONNECT_GROUP_INSTALL_ASSIGNMENT = 10002
CONNECT_GROUP_DESCRIBE = 10003
