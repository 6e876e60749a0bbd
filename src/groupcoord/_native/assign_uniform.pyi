import numpy as np
import numpy.typing as npt

def topic_base(partitions_per_topic: npt.NDArray[np.int32]) -> npt.NDArray[np.int64]: ...
def uniform(partitions_per_topic: npt.NDArray[np.int32],
            subscriptions_indptr: npt.NDArray[np.int64],
            subscriptions: npt.NDArray[np.int32],
            current: npt.NDArray[np.int32],
            force_heterogeneous: bool = ...) -> npt.NDArray[np.int32]: ...
def range_(partitions_per_topic: object,
           subscriptions_indptr: object,
           subscriptions: object,
           static_member: object = ...,
           current: object = ...) -> npt.NDArray[np.int32] | None: ...
