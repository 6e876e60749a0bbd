"""File descriptors run out during a segment roll (issue 16, "A failed segment roll wedges its
shard forever"). The node runs with RLIMIT_NOFILE 128 (soft and hard, so it cannot raise it).
A writer fills one shard's active segment with OffsetCommits to just under the segment size;
then client connections take every descriptor the node has left; then one more commit makes
the log roll, and opening the next segment fails with EMFILE. Every commit sent meanwhile
must be answered, with a retriable error (COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE
or NOT_COORDINATOR), not left waiting; once the connections close, commits succeed again; the
good group (on other shards) keeps its assignment; and after a kill -9 restart every
acknowledged commit reads back."""
import os
import socket
import time

import pytest

from hostile_harness import (GROUP_848, GROUP_CLASSIC, MIB, Probe, RssSampler, Wire,
                             catalog, node_serves, offset_fetch, serve_flags)
from groupcoord.protocol import messages as M

pytestmark = pytest.mark.hostile

NOFILE = 128
TOPIC, TOPIC_PARTITIONS = "fd-topic", 240
METADATA = "m" * 4000               # under offset.metadata.max.bytes (4096)
RETRIABLE = {14, 15, 16}            # load in progress, not available, not coordinator
SEGMENT_BYTES = 4 * MIB             # used when `serve` has a --segment-bytes flag
DEFAULT_SEGMENT_BYTES = 64 * MIB    # RuntimeConfig.segment_bytes otherwise
ANSWER_BOUND_S = 20.0


def commit(w, group, offset, partitions=TOPIC_PARTITIONS):
    """One OffsetCommit of `partitions` partitions at `offset` (~0.97 MB of records: under
    message.max.bytes) -> the set of partition error codes."""
    req = M.OffsetCommitRequest(group_id=group, generation_id_or_member_epoch=-1, topics=[
        M.OffsetCommitRequestTopic(name=TOPIC, partitions=[
            M.OffsetCommitRequestPartition(partition_index=p, committed_offset=offset,
                                           committed_metadata=METADATA)
            for p in range(partitions)])])
    r = w.call(req, 8)
    return {p.error_code for t in r.topics for p in t.partitions}


def active_segment_size(shard_dir):
    logs = sorted(f for f in os.listdir(shard_dir) if f.endswith(".log"))
    return os.path.getsize(os.path.join(shard_dir, logs[-1])) if logs else 0, len(logs)


def test_fd_exhaustion_during_a_segment_roll(node, good_group):
    flags = serve_flags()
    extra, seg = [], DEFAULT_SEGMENT_BYTES
    if "--segment-bytes" in flags:
        extra, seg = ["--segment-bytes", str(SEGMENT_BYTES)], SEGMENT_BYTES
    # An operator's --max-connections above what the fd limit holds (the default is derived
    # from the limit and would refuse connections before the descriptors run out).
    extra += ["--max-connections", "10000"]
    n = node(topics=catalog(extra={TOPIC: TOPIC_PARTITIONS}), nofile=NOFILE, shards=4,
             extra_args=extra, fsync="always")
    g = good_group(n)
    taken = {n.shard_of(GROUP_848), n.shard_of(GROUP_CLASSIC)}
    group = next(gid for gid in ("fd-writer-%d" % i for i in range(100))
                 if n.shard_of(gid) not in taken)
    shard_dir = os.path.join(n.data_dir, "__consumer_offsets-%d" % n.shard_of(group))
    acked = 0                       # the last offset committed with error 0
    sent = 0
    probe = Probe(n.host, n.port).start()
    rss = RssSampler(n.pid).start()
    hoard = []
    try:
        w = Wire(n.host, n.port, timeout=ANSWER_BOUND_S)
        # 1. fill the active segment to within two commits of the segment size
        while True:
            size, nlogs = active_segment_size(shard_dir)
            if size > seg - 2 * MIB:
                break
            sent += 1
            assert commit(w, group, sent) == {0}
            acked = sent
        assert nlogs == 1, "the fill rolled already (%d segments)" % nlogs
        # 2. take every descriptor the node has left
        t_exhaust = time.monotonic()
        while n.fd_count() < NOFILE and len(hoard) < 2 * NOFILE:
            hoard.append(socket.create_connection((n.host, n.port), timeout=5))
            if len(hoard) % 16 == 0:
                time.sleep(0.05)    # pacing: let the node accept them (the backlog is finite)
        deadline = time.monotonic() + 10
        while n.fd_count() < NOFILE and time.monotonic() < deadline:
            time.sleep(0.05)
        assert n.fd_count() >= NOFILE - 1, "the node holds %d fds" % n.fd_count()
        # 3. commit until the log has rolled (or failed to): each one answered
        answers = []
        t_roll = time.monotonic()
        while time.monotonic() - t_roll < 3.0:
            sent += 1
            codes = commit(w, group, sent)     # raises on a wait beyond ANSWER_BOUND_S
            answers.append(codes)
            if codes == {0}:
                acked = sent
            elif not codes <= RETRIABLE:
                raise AssertionError("commit %d answered %s, not a retriable error"
                                     % (sent, codes))
            time.sleep(0.05)
        print("while fds ran out: %d commits answered %s" % (len(answers), answers))
        assert any(c != {0} for c in answers), (
            "no commit failed: the roll did not hit EMFILE (segments: %s)"
            % (active_segment_size(shard_dir),))
        # 4. free the descriptors: the shard recovers (backoff of its reload, bounded)
        for s in hoard:
            s.close()
        hoard = []
        t_release = time.monotonic()
        deadline = t_release + 60
        while True:
            sent += 1
            codes = commit(w, group, sent)
            if codes == {0}:
                acked = sent
                break
            assert codes <= RETRIABLE, codes
            assert time.monotonic() < deadline, "the shard did not recover within 60 s"
            time.sleep(0.2)
        t_recovered = time.monotonic()
        print("recovered %.1f s after the descriptors were freed" % (t_recovered - t_release))
        for _ in range(3):          # and goes on writing
            sent += 1
            assert commit(w, group, sent) == {0}
            acked = sent
        w.close()
        time.sleep(1.0)             # the probe's window after recovery (measured below)
    finally:
        for s in hoard:
            s.close()
        probe.stop()
        rss.stop()
    # the probe was answered except while the node had no descriptor to accept it with
    outside = probe.failures(until=t_exhaust) + probe.failures(since=t_recovered)
    assert not outside, outside
    print("probe outside the exhaustion: %s" % probe.summary(since=t_recovered))
    assert not g.undisturbed(n.host, n.port)
    assert rss.peak < 512 * MIB
    # 5. nothing acknowledged is lost
    g.close()
    n.restart(kill9=True)
    got = offset_fetch(n.host, n.port, group)
    assert sorted(got) == [(TOPIC, p) for p in range(TOPIC_PARTITIONS)]
    for (topic, p), (offset, meta) in got.items():
        assert acked <= offset <= sent and meta == METADATA, (p, offset, acked, sent)
    assert node_serves(n.host, n.port)
