// Times Kafka's own server-side RangeAssignor (org.apache.kafka.coordinator.group.assignor)
// on one group read from a file, so that benchmarks/grid_assign_range.py can put it side by
// side with groupcoord's range_ on the very same inputs in the same run. Kafka's classes are
// not part of this repository: the caller passes them on the classpath (see the script).
//
// Input file (little-endian), written by grid_assign_range.py:
//   int32 magic 0x52414e47 ("RANG"), int32 T, int32 M, int32 N, int64 E
//   int32 partitions[T], int64 indptr[M + 1], int32 subscriptions[E], int32 current[N]
// i.e. the CSR arguments of groupcoord.assign.consumer.range_ plus the previous target
// assignment as an owner array (-1 = nobody). Member m is "member-%06d" (so Kafka's sort by
// member id is index order), topic t is Uuid(0x6772_6f75_70L, t + 1).
//
// Timing, in the manner of JMH (Kafka's ServerSideAssignorBenchmark: 5 warm-up and 5
// measured iterations, one JVM per parameter set): `iters` warm-up iterations of at least
// `iterMs` each, then `iters` measured ones; every call inside a measured iteration is timed
// with System.nanoTime. Prints "RESULT <median ns> <min ns> <calls> <HOMOGENEOUS|...>" and,
// if an output path is given, writes Kafka's result as an int32 owner array for the
// caller's byte-for-byte comparison.
//
// What the harness builds outside the timed call, as Kafka's group does before it calls the
// assignor: the GroupSpec (member subscriptions as HashSet<Uuid>, the previous assignment and
// its inverse), the subscription type (HOMOGENEOUS when every member subscribes the same
// set, as Kafka's group tracks it incrementally) and a SubscribedTopicDescriber (a HashMap
// lookup, as Kafka's SubscribedTopicDescriberImpl).

import org.apache.kafka.common.Uuid;
import org.apache.kafka.coordinator.group.api.assignor.GroupAssignment;
import org.apache.kafka.coordinator.group.api.assignor.GroupSpec;
import org.apache.kafka.coordinator.group.api.assignor.MemberAssignment;
import org.apache.kafka.coordinator.group.api.assignor.MemberSubscription;
import org.apache.kafka.coordinator.group.api.assignor.SubscribedTopicDescriber;
import org.apache.kafka.coordinator.group.api.assignor.SubscriptionType;
import org.apache.kafka.coordinator.group.assignor.RangeAssignor;
import org.apache.kafka.coordinator.group.modern.MemberAssignmentImpl;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.Collections;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;

public final class RangeAssignorBench {
    private static final int MAGIC = 0x52414e47;

    private record Member(Optional<String> rackId, Optional<String> instanceId,
                          Set<Uuid> subscribedTopicIds) implements MemberSubscription { }

    private static final class Spec implements GroupSpec {
        private final Map<String, Member> members;
        private final Map<String, MemberAssignment> assignments;
        private final Map<Uuid, Map<Integer, String>> owners;
        private final SubscriptionType type;

        Spec(Map<String, Member> members, Map<String, MemberAssignment> assignments,
             Map<Uuid, Map<Integer, String>> owners, SubscriptionType type) {
            this.members = members;
            this.assignments = assignments;
            this.owners = owners;
            this.type = type;
        }

        @Override public Collection<String> memberIds() { return members.keySet(); }
        @Override public SubscriptionType subscriptionType() { return type; }
        @Override
        public MemberSubscription memberSubscription(String id) { return members.get(id); }

        @Override
        public boolean isPartitionAssigned(Uuid topicId, int partition) {
            Map<Integer, String> m = owners.get(topicId);
            return m != null && m.containsKey(partition);
        }

        @Override
        public MemberAssignment memberAssignment(String id) {
            MemberAssignment a = assignments.get(id);
            return a != null ? a : new MemberAssignmentImpl(Collections.emptyMap());
        }
    }

    private static final class Topics implements SubscribedTopicDescriber {
        private final Map<Uuid, Integer> partitions;

        Topics(Map<Uuid, Integer> partitions) { this.partitions = partitions; }

        @Override
        public int numPartitions(Uuid topicId) {
            Integer p = partitions.get(topicId);
            return p == null ? -1 : p;
        }

        @Override
        public Set<String> racksForPartition(Uuid topicId, int partition) { return Set.of(); }
    }

    static Uuid topicId(int t) { return new Uuid(0x67726f7570L, t + 1); }

    static String memberId(int m) { return String.format("member-%06d", m); }

    public static void main(String[] args) throws IOException {
        if (args.length < 3) {
            System.err.println("usage: RangeAssignorBench INPUT ITERS ITER_MS [OUTPUT]");
            System.exit(2);
        }
        ByteBuffer in;
        try (FileChannel ch = FileChannel.open(Path.of(args[0]), StandardOpenOption.READ)) {
            in = ch.map(FileChannel.MapMode.READ_ONLY, 0, ch.size()).order(ByteOrder.LITTLE_ENDIAN);
        }
        int iters = Integer.parseInt(args[1]);
        long iterNs = Long.parseLong(args[2]) * 1_000_000L;
        if (in.getInt() != MAGIC) throw new IOException("not a range cell file");
        int nTopics = in.getInt(), nMembers = in.getInt(), nUnits = in.getInt();
        long nSubs = in.getLong();
        int[] ppt = new int[nTopics];
        long[] indptr = new long[nMembers + 1];
        int[] subs = new int[(int) nSubs];
        int[] cur = new int[nUnits];
        for (int t = 0; t < nTopics; t++) ppt[t] = in.getInt();
        for (int m = 0; m <= nMembers; m++) indptr[m] = in.getLong();
        for (int e = 0; e < nSubs; e++) subs[e] = in.getInt();
        for (int u = 0; u < nUnits; u++) cur[u] = in.getInt();
        long[] base = new long[nTopics + 1];
        for (int t = 0; t < nTopics; t++) base[t + 1] = base[t] + ppt[t];

        Uuid[] ids = new Uuid[nTopics];
        Map<Uuid, Integer> parts = new HashMap<>();
        for (int t = 0; t < nTopics; t++) {
            ids[t] = topicId(t);
            parts.put(ids[t], ppt[t]);
        }
        Map<String, Member> members = new HashMap<>();
        Set<Uuid> first = null;
        boolean homogeneous = true;
        for (int m = 0; m < nMembers; m++) {
            Set<Uuid> s = new HashSet<>();
            for (long e = indptr[m]; e < indptr[m + 1]; e++) s.add(ids[subs[(int) e]]);
            if (first == null) first = s;
            else if (!first.equals(s)) homogeneous = false;
            members.put(memberId(m), new Member(Optional.empty(), Optional.empty(), s));
        }
        // previous target assignment and its inverse (topic -> partition -> member)
        List<Map<Uuid, Set<Integer>>> held = new ArrayList<>(nMembers);
        for (int m = 0; m < nMembers; m++) held.add(new HashMap<>());
        Map<Uuid, Map<Integer, String>> owners = new HashMap<>();
        for (int t = 0; t < nTopics; t++) {
            for (int p = 0; p < ppt[t]; p++) {
                int o = cur[(int) (base[t] + p)];
                if (o < 0 || o >= nMembers) continue;
                held.get(o).computeIfAbsent(ids[t], k -> new HashSet<>()).add(p);
                owners.computeIfAbsent(ids[t], k -> new HashMap<>()).put(p, memberId(o));
            }
        }
        Map<String, MemberAssignment> assignments = new HashMap<>();
        for (int m = 0; m < nMembers; m++) {
            if (!held.get(m).isEmpty()) {
                assignments.put(memberId(m), new MemberAssignmentImpl(held.get(m)));
            }
        }
        SubscriptionType type = homogeneous ? SubscriptionType.HOMOGENEOUS
                                            : SubscriptionType.HETEROGENEOUS;
        Spec spec = new Spec(members, assignments, owners, type);
        Topics topics = new Topics(parts);
        RangeAssignor assignor = new RangeAssignor();

        long sink = 0;
        for (int i = 0; i < iters; i++) {                    // warm-up iterations
            long end = System.nanoTime() + iterNs;
            do {
                sink += assignor.assign(spec, topics).members().size();
            } while (System.nanoTime() < end);
        }
        long[] times = new long[1024];
        int n = 0;
        for (int i = 0; i < iters; i++) {                    // measured iterations
            long end = System.nanoTime() + iterNs;
            long now;
            do {
                long t0 = System.nanoTime();
                sink += assignor.assign(spec, topics).members().size();
                now = System.nanoTime();
                if (n == times.length) times = Arrays.copyOf(times, n * 2);
                times[n++] = now - t0;
            } while (now < end);
        }
        long[] ts = Arrays.copyOf(times, n);
        Arrays.sort(ts);
        long median = n % 2 == 1 ? ts[n / 2] : (ts[n / 2 - 1] + ts[n / 2]) / 2;
        System.out.println("RESULT " + median + " " + ts[0] + " " + n + " " + type
                           + " " + (sink & 1));

        if (args.length > 3) {
            GroupAssignment result = assignor.assign(spec, topics);
            Map<Uuid, Integer> topicIndex = new HashMap<>();
            for (int t = 0; t < nTopics; t++) topicIndex.put(ids[t], t);
            int[] owner = new int[nUnits];
            Arrays.fill(owner, -1);
            for (Map.Entry<String, MemberAssignment> e : result.members().entrySet()) {
                int m = Integer.parseInt(e.getKey().substring("member-".length()));
                for (Map.Entry<Uuid, Set<Integer>> tp : e.getValue().partitions().entrySet()) {
                    long b = base[topicIndex.get(tp.getKey())];
                    for (int p : tp.getValue()) owner[(int) (b + p)] = m;
                }
            }
            ByteBuffer out = ByteBuffer.allocate(4 * nUnits).order(ByteOrder.LITTLE_ENDIAN);
            for (int u = 0; u < nUnits; u++) out.putInt(owner[u]);
            Files.write(Path.of(args[3]), out.array());
        }
    }
}
