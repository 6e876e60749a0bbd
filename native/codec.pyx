# cython: language_level=3, boundscheck=False, wraparound=False
# Request/response frames and the (api_key, version) codec table.
#
# Frame layout (Kafka's):
#   request  = int32 size | int16 api_key | int16 api_version | int32 correlation_id
#              | client_id: int16-length nullable string (never compact, even in header v2)
#              | tagged fields (header v2, i.e. flexible api versions only) | body
#   response = int32 size | int32 correlation_id
#              | tagged fields (header v1: flexible versions, EXCEPT ApiVersions, whose
#                response header is always v0 so that any client can parse it) | body
# The *_frame functions below take/return frames; decode takes a frame without its size
# prefix (FrameSplitter strips it), encode returns it with the prefix.
#
# Trailing bytes: a request body may go on after the last field its version defines (a client
# that writes a newer layout, or librdkafka's Metadata v9+ "all topics" request, which leaves 3
# stale bytes behind its null topic array). Kafka reads the fields it knows and ignores the
# rest, and so do we; decode_request_frame reports how many bytes it ignored in
# header.trailing_bytes (0 on a plain RequestHeader; a TrailingRequestHeader otherwise, so the
# common case builds the same 4-field header as before). Responses and embedded formats stay strict: they come from our own
# server or are written by us, so bytes left over there mean a codec bug (docs/decisions.md).
from cpython.buffer cimport PyBuffer_Release
from cpython.ref cimport PyObject
from groupcoord._native.krpc cimport *
from groupcoord._native.krpc import DecodeError, UnsupportedVersionError, EncodeError
import groupcoord.protocol.messages as _m

cdef object C_RequestHeader = _m.RequestHeader
cdef object C_TrailingRequestHeader = _m.TrailingRequestHeader

cdef int API_VERSIONS = 18
cdef PyObject* _fast[128][32]      # borrowed references; _codecs owns them
cdef dict _codecs = {}              # (api_key, version) -> MessageCodec
cdef dict _type_key = {}            # request/response class -> api_key
cdef dict _data = {}                # (name, version) -> DataCodec
cdef dict _ranges = {}              # api_key -> [min_version, max_version]


cdef inline MessageCodec _lookup(int api_key, int version):
    cdef PyObject* p
    if 0 <= api_key < 128 and 0 <= version < 32:
        p = _fast[api_key][version]
        if p == NULL:
            return None
        return <MessageCodec>p
    return _codecs.get((api_key, version))


cdef int register_message(int api_key, int version, bint flexible, object req_t, object resp_t,
                          dec_fn dq, enc_fn eq, dec_fn dp, enc_fn ep) except -1:
    cdef MessageCodec c = MessageCodec.__new__(MessageCodec)
    c.api_key = api_key
    c.version = version
    c.flexible = flexible
    c.request_type = req_t
    c.response_type = resp_t
    c.dec_req, c.enc_req, c.dec_resp, c.enc_resp = dq, eq, dp, ep
    _codecs[(api_key, version)] = c
    if 0 <= api_key < 128 and 0 <= version < 32:
        _fast[api_key][version] = <PyObject*>c
    _type_key[req_t] = api_key
    _type_key[resp_t] = api_key
    r = _ranges.setdefault(api_key, [version, version])
    r[0] = min(r[0], version)
    r[1] = max(r[1], version)
    return 0


cdef int register_data(str name, int version, object t, dec_fn d, enc_fn e) except -1:
    cdef DataCodec c = DataCodec.__new__(DataCodec)
    c.name = name
    c.version = version
    c.type = t
    c.dec, c.enc = d, e
    _data[(name, version)] = c
    return 0


cdef inline int _no_trailing(Reader* r) except -1:
    if r.pos != r.end:
        r.field = b"<end of message>"
        raise_invalid(r, "%d unexpected trailing byte(s)" % (r.end - r.pos))
    return 0


cdef object _decode_body(dec_fn fn, object data, bint strict):
    cdef Reader r
    cdef Py_buffer view
    cdef int taken = reader_from_object(&r, data, &view)
    try:
        msg = fn(&r)
        if strict:
            _no_trailing(&r)
        return msg
    finally:
        if taken:
            PyBuffer_Release(&view)


cdef inline int _check_type(object msg, object expected) except -1:
    if type(msg) is not expected and not isinstance(msg, expected):
        raise EncodeError("expected %s, got %s" % (expected.__name__, type(msg).__name__))
    return 0


cdef int _encode_into(Writer* w, enc_fn fn, object msg) except -1:
    # Cython raises TypeError/OverflowError when a field holds a value its wire type cannot
    # carry, and AttributeError for a foreign object; all become EncodeError naming the field.
    try:
        fn(w, msg)
    except (TypeError, OverflowError, AttributeError, ValueError, BufferError) as e:
        if isinstance(e, EncodeError):
            raise
        f = (<bytes>w.field).decode() if w.field != NULL else "<message>"
        raise EncodeError("cannot encode %s: %s" % (f, e), f) from e
    return 0


cdef bytes _encode_body(enc_fn fn, object msg):
    cdef Writer w
    writer_init(&w, 256)
    try:
        _encode_into(&w, fn, msg)
        return writer_bytes(&w)
    finally:
        writer_free(&w)


cdef class MessageCodec:
    def decode_request(self, data):
        """Decode a request body (no header) of this api version; bytes after the last field
        are ignored, as Kafka does."""
        return _decode_body(self.dec_req, data, False)

    def decode_response(self, data):
        """Decode a response body (no header) of this api version; trailing bytes are a
        DecodeError."""
        return _decode_body(self.dec_resp, data, True)

    def encode_request(self, msg):
        """Encode a request body (no header)."""
        _check_type(msg, self.request_type)
        return _encode_body(self.enc_req, msg)

    def encode_response(self, msg):
        """Encode a response body (no header)."""
        _check_type(msg, self.response_type)
        return _encode_body(self.enc_resp, msg)

    @property
    def response_header_version(self):
        return 1 if self.flexible and self.api_key != API_VERSIONS else 0

    @property
    def request_header_version(self):
        return 2 if self.flexible else 1

    def __repr__(self):
        return "<MessageCodec %s v%d%s>" % (self.request_type.__name__[:-len("Request")],
                                           self.version, " flexible" if self.flexible else "")


cdef class DataCodec:
    def decode(self, data):
        return _decode_body(self.dec, data, True)

    def decode_from(self, data, Py_ssize_t offset=0):
        """Decode starting at offset, tolerating trailing bytes (the forward-compatibility
        rule of the embedded formats); returns (message, end offset)."""
        cdef Reader r
        cdef Py_buffer view
        cdef int taken = reader_from_object(&r, data, &view)
        try:
            if offset < 0 or offset > r.end:
                raise ValueError("offset %d outside the buffer" % offset)
            r.pos = offset
            msg = self.dec(&r)
            return msg, r.pos
        finally:
            if taken:
                PyBuffer_Release(&view)

    def encode(self, msg):
        _check_type(msg, self.type)
        return _encode_body(self.enc, msg)

    def __repr__(self):
        return "<DataCodec %s v%d>" % (self.name, self.version)


def get_codec(int api_key, int version):
    """The MessageCodec of (api_key, version); raises UnsupportedVersionError if none."""
    c = _lookup(api_key, version)
    if c is None:
        raise UnsupportedVersionError("unsupported api key %d version %d" % (api_key, version),
                                      api_key, version)
    return c


def get_data_codec(str name, int version):
    c = _data.get((name, version))
    if c is None:
        raise UnsupportedVersionError("unsupported %s version %d" % (name, version),
                                      None, version)
    return c


def api_key_of(msg_type):
    """The api key of a request or response class, or None."""
    return _type_key.get(msg_type)


def supported_versions():
    """{api_key: (min_version, max_version)} of every registered API."""
    return {k: (v[0], v[1]) for k, v in sorted(_ranges.items())}


def decode_request_frame(data):
    """Decode one request frame (without its 4-byte size prefix) into (RequestHeader, body).

    Bytes after the body's last field are ignored and counted in header.trailing_bytes.
    Raises UnsupportedVersionError (with .api_key, .api_version, .correlation_id) for an api
    this node does not speak, and DecodeError for malformed bytes; once the header has been
    read, the DecodeError carries it as .header so the caller can answer the request.
    """
    cdef Reader r
    cdef Py_buffer view
    cdef int taken = reader_from_object(&r, data, &view)
    cdef int16_t api_key, version
    cdef int32_t corr
    cdef MessageCodec c
    header = None
    try:
        read_request_ids(&r, &api_key, &version, &corr)
        c = _lookup(api_key, version)
        if c is None:
            raise unsupported_request(api_key, version, corr)
        client_id = read_client_id(&r, c.flexible)
        header = C_RequestHeader(api_key, version, corr, client_id)
        body = c.dec_req(&r)
        if r.pos != r.end:              # rare; the common case pays this one compare
            header = C_TrailingRequestHeader(api_key, version, corr, client_id, r.end - r.pos)
        return header, body
    except DecodeError as e:
        e.header = header
        raise
    finally:
        if taken:
            PyBuffer_Release(&view)


def encode_request_frame(msg, int version, int32_t correlation_id, client_id="groupcoord"):
    """Encode a request with its header and 4-byte size prefix."""
    return _frame(msg, version, correlation_id, True, client_id)


cdef bytes _frame(object msg, int version, int32_t correlation_id, bint request,
                  object client_id):
    # The codec of msg's api key at version (msg checked against its request or response
    # type), then: size placeholder | header | body, and the size is backfilled.
    key = _type_key.get(type(msg))
    if key is None:
        raise EncodeError("%s is not a %s message"
                          % (type(msg).__name__, "request" if request else "response"))
    cdef MessageCodec c = get_codec(key, version)
    _check_type(msg, c.request_type if request else c.response_type)
    cdef Writer w
    writer_init(&w, 256)
    try:
        write_int32(&w, 0)
        if request:
            write_int16(&w, c.api_key)
            write_int16(&w, c.version)
        write_int32(&w, correlation_id)
        if request:
            w.field = b"RequestHeader.client_id"
            write_string(&w, client_id, 0, 1)
        if c.flexible and (request or c.api_key != API_VERSIONS):
            write_uvarint(&w, 0)
        _encode_into(&w, c.enc_req if request else c.enc_resp, msg)
        put_int32_at(&w, 0, <int32_t>(w.len - 4))
        return writer_bytes(&w)
    finally:
        writer_free(&w)


def encode_response_frame(msg, int version, int32_t correlation_id):
    """Encode a response with its header (v0 for ApiVersions, else by flexibility) and 4-byte
    size prefix."""
    return _frame(msg, version, correlation_id, False, None)


def decode_response_frame(data, int api_key, int version):
    """Decode one response frame (without its size prefix) -> (correlation_id, body)."""
    cdef MessageCodec c = get_codec(api_key, version)
    cdef Reader r
    cdef Py_buffer view
    cdef int taken = reader_from_object(&r, data, &view)
    try:
        r.field = b"ResponseHeader.correlation_id"
        corr = read_int32(&r)
        if c.flexible and c.api_key != API_VERSIONS:
            r.field = b"ResponseHeader.<tagged fields>"
            skip_tagged_fields(&r)
        body = c.dec_resp(&r)
        _no_trailing(&r)
        return corr, body
    finally:
        if taken:
            PyBuffer_Release(&view)

