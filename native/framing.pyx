# cython: language_level=3, boundscheck=False, wraparound=False
# Splits a TCP byte stream into Kafka frames.
#
# Layout: frame = int32 size (big-endian, >= 0) | size bytes of payload.
# The size is checked against max_frame_bytes as soon as its 4 bytes arrive, before any
# payload is buffered, so a lying size cannot make us buffer (or allocate) more than the
# limit; a negative size is rejected the same way.
from libc.stdint cimport uint32_t, int32_t
from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE
from groupcoord._native.krpc import FrameTooLargeError

DEFAULT_MAX_FRAME_BYTES = 100 * 1024 * 1024


cdef inline int32_t _be32(const unsigned char* p) noexcept:
    return <int32_t>((<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8)
                     | <uint32_t>p[3])


cdef class FrameSplitter:
    """Feed it bytes as they arrive; it returns the complete frame payloads (bytes, without
    the size prefix) and keeps any partial frame for the next feed.

    Raises FrameTooLargeError for a size prefix above max_frame_bytes or below zero, as soon
    as the 4 size bytes arrive; the error's .frames holds the complete frames that preceded
    the bad one in the same feed. The stream cannot be resynchronised after that: every
    later feed raises the same error, and the caller closes the connection.
    """
    cdef bytearray _buf
    cdef readonly Py_ssize_t max_frame_bytes
    cdef readonly Py_ssize_t frames_split
    cdef readonly object error      # the FrameTooLargeError that broke the stream, if any

    def __init__(self, Py_ssize_t max_frame_bytes=DEFAULT_MAX_FRAME_BYTES):
        if max_frame_bytes < 0:
            raise ValueError("max_frame_bytes must be >= 0")
        self._buf = bytearray()
        self.max_frame_bytes = max_frame_bytes
        self.frames_split = 0

    def raise_limit(self, Py_ssize_t max_frame_bytes):
        """Take frames up to max_frame_bytes from now on (never lower: a size prefix already
        read was checked against the old limit). A SASL connection reads with Kafka's
        pre-authentication bound until its client has authenticated."""
        if max_frame_bytes < self.max_frame_bytes:
            raise ValueError("raise_limit cannot lower the limit (%d < %d)"
                             % (max_frame_bytes, self.max_frame_bytes))
        self.max_frame_bytes = max_frame_bytes

    @property
    def pending(self):
        """Bytes buffered of an incomplete frame."""
        return len(self._buf)

    cdef Py_ssize_t _split(self, const unsigned char* p, Py_ssize_t n, list out) except -1:
        # Appends every complete frame in p[0:n] to out; returns the bytes consumed.
        cdef Py_ssize_t pos = 0
        cdef int32_t size
        while n - pos >= 4:
            size = _be32(p + pos)
            if size < 0 or size > self.max_frame_bytes:
                # The stream cannot be resynchronised: remember the error (every later feed
                # raises it again) and hand over the complete frames that preceded it.
                self.error = FrameTooLargeError(
                    "frame size %d is outside 0..%d (max_frame_bytes)"
                    % (size, self.max_frame_bytes), size, self.max_frame_bytes)
                self.error.frames = list(out)
                self.frames_split += len(out)
                self._buf = bytearray()
                raise self.error
            if n - pos - 4 < size:
                break
            out.append(PyBytes_FromStringAndSize(<const char*>(p + pos + 4), size))
            pos += 4 + size
        self.frames_split += len(out)
        return pos

    def feed(self, data):
        """Add received bytes; return the list of complete frame payloads."""
        cdef list out = []
        cdef Py_buffer view
        cdef Py_ssize_t used
        if self.error is not None:
            raise self.error
        if len(self._buf) == 0:
            # Common case: nothing pending, split straight out of the received buffer and
            # copy only a trailing partial frame.
            PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
            try:
                used = self._split(<const unsigned char*>view.buf, view.len, out)
                if used < view.len:
                    self._buf += (<const char*>view.buf)[used:view.len]
            finally:
                PyBuffer_Release(&view)
            return out
        self._buf += data
        cdef const unsigned char[::1] mv = self._buf
        used = self._split(&mv[0], len(self._buf), out)
        del mv
        if used:
            del self._buf[:used]
        return out
