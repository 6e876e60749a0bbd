# cython: language_level=3
from groupcoord._native.krpc cimport Reader, Writer

ctypedef object (*dec_fn)(Reader* r)
ctypedef int (*enc_fn)(Writer* w, object m) except -1


cdef class MessageCodec:
    """The request and response codecs of one (api_key, version)."""
    cdef readonly int api_key
    cdef readonly int version
    cdef readonly bint flexible
    cdef readonly object request_type
    cdef readonly object response_type
    cdef dec_fn dec_req
    cdef enc_fn enc_req
    cdef dec_fn dec_resp
    cdef enc_fn enc_resp


cdef class DataCodec:
    """The codec of one version of an embedded format (subscription, assignment, ...)."""
    cdef readonly str name
    cdef readonly int version
    cdef readonly object type
    cdef dec_fn dec
    cdef enc_fn enc


cdef int register_message(int api_key, int version, bint flexible, object req_t, object resp_t,
                          dec_fn dq, enc_fn eq, dec_fn dp, enc_fn ep) except -1
cdef int register_data(str name, int version, object t, dec_fn d, enc_fn e) except -1
