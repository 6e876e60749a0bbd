"""How a refusal is expressed: ``error_response`` builds the response of any request's API
carrying one error code, and ``Reject`` is raised by a handler's steps to refuse with a code
and message (its handler turns it into its API's error response; nothing has changed)."""
from __future__ import annotations

from typing import Optional

from groupcoord.protocol import messages as m

__all__ = ["error_response", "Reject"]


class Reject(Exception):
    """A request refused with an error code and message (raised by the steps, answered by
    the handler; nothing has been changed)."""

    def __init__(self, code, message: str):
        super().__init__(message)
        self.code = int(code)
        self.message = message


def error_response(request, version: int, code: int, message: Optional[str] = None):
    """The response of ``request``'s API carrying ``code`` everywhere it can (top level, or
    per group / topic / partition as the API has it)."""
    cls = type(request)
    while cls.__module__ != m.__name__:     # an internal subclass answers as its wire message
        cls = cls.__base__
    name = cls.__name__
    resp_cls = getattr(m, name[:-len("Request")] + "Response")
    code = int(code)
    fields = resp_cls.__struct_fields__
    kw = {}
    if "error_code" in fields:
        kw["error_code"] = code
    if "error_message" in fields and message is not None:
        kw["error_message"] = message
    if isinstance(request, m.OffsetCommitRequest):
        kw["topics"] = [m.OffsetCommitResponseTopic(name=t.name, partitions=[
            m.OffsetCommitResponsePartition(partition_index=p.partition_index, error_code=code)
            for p in t.partitions]) for t in request.topics]
    elif isinstance(request, m.OffsetFetchRequest):
        if version >= 8:
            kw["groups"] = [m.OffsetFetchResponseGroup(group_id=g.group_id, error_code=code)
                            for g in request.groups]
    elif isinstance(request, m.DescribeGroupsRequest):
        kw["groups"] = [m.DescribeGroupsResponseDescribedGroup(error_code=code, group_id=g)
                        for g in request.groups]
    elif isinstance(request, (m.ConsumerGroupDescribeRequest, m.ConnectGroupDescribeRequest)):
        grp = getattr(m, name[:-len("Request")] + "ResponseDescribedGroup")
        kw["groups"] = [grp(error_code=code, error_message=message, group_id=g)
                        for g in request.group_ids]
    elif isinstance(request, m.FindCoordinatorRequest) and version >= 4:
        kw.pop("error_code", None)
        kw.pop("error_message", None)
        kw["coordinators"] = [m.FindCoordinatorResponseCoordinator(
            key=k, node_id=-1, error_code=code, error_message=message)
            for k in request.coordinator_keys]
    elif isinstance(request, m.LeaveGroupRequest) and version >= 3:
        kw["members"] = []
    elif isinstance(request, m.DeleteGroupsRequest):
        kw["results"] = [m.DeleteGroupsResponseDeletableGroupResult(group_id=g, error_code=code)
                         for g in request.groups_names]
    elif isinstance(request, m.DescribeConfigsRequest):
        kw["results"] = [m.DescribeConfigsResponseDescribeConfigsResult(
            error_code=code, error_message=message, resource_type=r.resource_type,
            resource_name=r.resource_name) for r in request.resources]
    elif isinstance(request, m.IncrementalAlterConfigsRequest):
        kw["responses"] = [m.IncrementalAlterConfigsResponseAlterConfigsResourceResponse(
            error_code=code, error_message=message, resource_type=r.resource_type,
            resource_name=r.resource_name) for r in request.resources]
    return resp_cls(**kw)
