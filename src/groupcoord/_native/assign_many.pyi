import numpy as np
import numpy.typing as npt

I32 = npt.NDArray[np.int32]
I64 = npt.NDArray[np.int64]
U8 = npt.NDArray[np.uint8]
F64 = npt.NDArray[np.float64]

M_UNASSIGNED: int
M_INVALID: int
M_MOVED: int
M_MIN_MOVED: int
M_SPREAD: int
M_MAX_LOAD: int
M_MIN_LOAD: int
M_COLUMNS: int

def consumer_units(partitions_per_topic: I32, topic_off: I64) -> I64: ...
def connect_units(task_count: I64, conn_off: I64) -> I64: ...
def uniform_many(partitions_per_topic: I32, topic_off: I64, sub_indptr: I64, subs: I32,
                 member_off: I64, current: I32, out: I32) -> I64: ...
def range_many(partitions_per_topic: I32, topic_off: I64, sub_indptr: I64, subs: I32,
               member_off: I64, out: I32) -> I64: ...
def cooperative_sticky_many(partitions_per_topic: I32, topic_off: I64, sub_indptr: I64,
                            subs: I32, member_off: I64, current: I32, target: I32,
                            final: I32) -> I64: ...
def eager_many(task_count: I64, conn_off: I64, n_workers: I32, out: I32) -> I64: ...
def ica_many(task_count: I64, conn_off: I64, current: I32, n_workers: I32, hold: U8,
             lost_in: U8, cand: U8, member_off: I64, out: I32) -> tuple[I64, I64, I64]: ...
def members_csr_many(owner: I32, unit_off: I64, member_off: I64,
                     local_units: bool = ...) -> tuple[I64, I32]: ...
def assignment_metrics(prev: I32, new: I32, unit_off: I64, member_off: I64,
                       kind: U8) -> I64: ...
def diff_counts_many(current: I32, target: I32, unit_off: I64) -> I64: ...
def validate_many(owner: I32, unit_off: I64, member_off: I64, required: U8) -> I64: ...
def reconcile_round_many(unit_off: I64, member_off: I64, hb_order: I32, phase: F64,
                         own_indptr: I64, own_units: I32, tgt_indptr: I64, tgt_units: I32,
                         target: I32, holder_old: I32, holder_new: I32, told: U8,
                         counts: U8, since: F64, released_at: F64, acquired_at: F64,
                         down: F64, unowned: I64, max_unowned: I64, in_flight: I64,
                         last_change: F64, t0: float,
                         assign_before_release: bool = ...) -> None: ...
def owned_twice_many(unit_off: I64, holder_old: I32, holder_new: I32, released_at: F64,
                     acquired_at: F64) -> I64: ...
