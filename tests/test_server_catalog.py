"""The node's files: topics.json (merge rules, atomic writes) and the cluster id."""
import json
import os

import pytest

from groupcoord.groups.topics import TopicCatalog, topic_id_for
from groupcoord.server.catalog import (CatalogError, CatalogStore, TopicSpec, load_topics_file,
                                       load_or_create_cluster_id, merge_topics, parse_topic_arg)


def test_parse_topic_arg():
    assert parse_topic_arg("orders:6") == TopicSpec("orders", 6)
    for bad in ("orders", "orders:x", "orders:0", ":3", "b@d:1"):
        with pytest.raises(CatalogError):
            parse_topic_arg(bad)


def test_topics_file(tmp_path):
    p = tmp_path / "t.json"
    p.write_text(json.dumps([{"name": "a", "partitions": 2}, {"name": "b", "partitions": 1}]))
    assert load_topics_file(str(p)) == [TopicSpec("a", 2), TopicSpec("b", 1)]
    p.write_text('[{"name": "a"}]')
    with pytest.raises(CatalogError, match="partitions"):
        load_topics_file(str(p))
    with pytest.raises(CatalogError, match="No such file"):
        load_topics_file(str(tmp_path / "missing.json"))


def test_merge_adds_increases_and_refuses_decrease():
    stored = TopicCatalog.of(a=3)
    cat, changed = merge_topics(stored, [TopicSpec("a", 3), TopicSpec("b", 2)])
    assert changed and cat.by_name["b"].partitions == 2
    cat, changed = merge_topics(cat, [TopicSpec("a", 5)])
    assert changed and cat.by_name["a"].partitions == 5
    assert cat.by_name["a"].topic_id == topic_id_for("a")
    cat2, changed = merge_topics(cat, [TopicSpec("a", 5)])
    assert not changed
    with pytest.raises(CatalogError, match="cannot be removed"):
        merge_topics(cat, [TopicSpec("a", 2)])
    with pytest.raises(CatalogError, match="given twice"):
        merge_topics(cat, [TopicSpec("c", 1), TopicSpec("c", 2)])


def test_store_roundtrip_is_atomic(tmp_path):
    st = CatalogStore(str(tmp_path / "data"))
    assert len(st.load()) == 0
    st.save(TopicCatalog.of(x=4, y=1))
    assert {t.name: t.partitions for t in CatalogStore(st.data_dir).load()} == {"x": 4, "y": 1}
    assert not [f for f in os.listdir(st.data_dir) if ".tmp" in f]
    with open(st.path, "w") as fh:
        fh.write("{not json")
    with pytest.raises(CatalogError, match="not a valid topic catalog"):
        st.load()


def test_cluster_id_is_stable_per_data_dir(tmp_path):
    a = load_or_create_cluster_id(str(tmp_path / "d1"))
    assert a == load_or_create_cluster_id(str(tmp_path / "d1"))
    assert a != load_or_create_cluster_id(str(tmp_path / "d2"))
    assert len(a) == 22
