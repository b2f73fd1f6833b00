//! SPDY/3 name/value header blocks: a 32-bit count, then each lower-case name and its values
//! (joined by NUL) with 32-bit lengths, compressed with zlib primed with the SPDY/3 dictionary.
//! Each direction of a connection is one zlib stream, sync-flushed after every block, so a
//! [`HeaderEncoder`] and a [`HeaderDecoder`] live as long as the connection and see its header
//! blocks in wire order.

use bytes::{Buf, BufMut, BytesMut};
use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress, Status};
use http::{HeaderMap, HeaderName, HeaderValue};

/// The zlib dictionary of SPDY/3 (draft-mbelshe-httpbis-spdy-00, §2.6.10.1): each common header
/// name and method as a 32-bit length and its bytes, then common values as plain text.
pub const DICTIONARY: [u8; DICTIONARY_LEN] = build_dictionary();

const DICTIONARY_WORDS: [&str; 66] = [
    "options",
    "head",
    "post",
    "put",
    "delete",
    "trace",
    "accept",
    "accept-charset",
    "accept-encoding",
    "accept-language",
    "accept-ranges",
    "age",
    "allow",
    "authorization",
    "cache-control",
    "connection",
    "content-base",
    "content-encoding",
    "content-language",
    "content-length",
    "content-location",
    "content-md5",
    "content-range",
    "content-type",
    "date",
    "etag",
    "expect",
    "expires",
    "from",
    "host",
    "if-match",
    "if-modified-since",
    "if-none-match",
    "if-range",
    "if-unmodified-since",
    "last-modified",
    "location",
    "max-forwards",
    "pragma",
    "proxy-authenticate",
    "proxy-authorization",
    "range",
    "referer",
    "retry-after",
    "server",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "user-agent",
    "vary",
    "via",
    "warning",
    "www-authenticate",
    "method",
    "get",
    "status",
    "200 OK",
    "version",
    "HTTP/1.1",
    "url",
    "public",
    "set-cookie",
    "keep-alive",
    "origin",
    "",
];

const DICTIONARY_TAIL: &str = "100101201202205206300302303304305306307402405406407408409410411412\
413414415416417502504505203 Non-Authoritative Information204 No Content301 Moved Permanently\
400 Bad Request401 Unauthorized403 Forbidden404 Not Found500 Internal Server Error501 Not \
Implemented503 Service UnavailableJan Feb Mar Apr May Jun Jul Aug Sept Oct Nov Dec 00:00:00 \
Mon, Tue, Wed, Thu, Fri, Sat, Sun, GMTchunked,text/html,image/png,image/jpg,image/gif,\
application/xml,application/xhtml+xml,text/plain,text/javascript,publicprivatemax-age=gzip,\
deflate,sdchcharset=utf-8charset=iso-8859-1,utf-,*,enq=0.";

// The list ends with an empty sentinel so the array length stays a literal.
const WORD_COUNT: usize = DICTIONARY_WORDS.len() - 1;

const fn dictionary_len() -> usize {
    let mut len = DICTIONARY_TAIL.len();
    let mut i = 0;
    while i < WORD_COUNT {
        len += 4 + DICTIONARY_WORDS[i].len();
        i += 1;
    }
    len
}

const DICTIONARY_LEN: usize = dictionary_len();

const fn build_dictionary() -> [u8; DICTIONARY_LEN] {
    let mut out = [0u8; DICTIONARY_LEN];
    let mut at = 0;
    let mut i = 0;
    while i < WORD_COUNT {
        let word = DICTIONARY_WORDS[i].as_bytes();
        let len = (word.len() as u32).to_be_bytes();
        let mut j = 0;
        while j < 4 {
            out[at] = len[j];
            at += 1;
            j += 1;
        }
        j = 0;
        while j < word.len() {
            out[at] = word[j];
            at += 1;
            j += 1;
        }
        i += 1;
    }
    let tail = DICTIONARY_TAIL.as_bytes();
    let mut j = 0;
    while j < tail.len() {
        out[at] = tail[j];
        at += 1;
        j += 1;
    }
    out
}

/// A header block that could not be built or read; on the read side the connection's zlib
/// context is then unusable, so the connection ends.
#[derive(Debug, thiserror::Error)]
pub enum HeaderBlockError {
    /// zlib refused to compress.
    #[error("compressing a header block: {0}")]
    Compress(String),
    /// zlib refused to inflate (corrupt data or a wrong dictionary).
    #[error("inflating a header block: {0}")]
    Decompress(String),
    /// The inflated block is larger than allowed.
    #[error("header block larger than {0} bytes")]
    TooLarge(usize),
    /// The block ended in the middle of a field.
    #[error("truncated header block")]
    Truncated,
    /// Bytes after the last announced field.
    #[error("{0} bytes after the last header")]
    TrailingBytes(usize),
    /// A name that is empty or not a valid header name.
    #[error("invalid header name {0:?}")]
    InvalidName(String),
    /// A value with bytes a header value may not hold.
    #[error("invalid value for header {0}")]
    InvalidValue(String),
    /// More values than a header map holds (the `http` crate's bound, 32768 entries).
    #[error("more header values than a header map holds")]
    TooManyValues,
}

/// Writes uncompressed header blocks (also what [`HeaderEncoder`] compresses).
pub fn encode_plain(headers: &HeaderMap, dst: &mut Vec<u8>) {
    dst.put_u32(headers.keys_len() as u32);
    for name in headers.keys() {
        let name_bytes = name.as_str().as_bytes();
        dst.put_u32(name_bytes.len() as u32);
        dst.put_slice(name_bytes);
        let len_at = dst.len();
        dst.put_u32(0);
        for (i, value) in headers.get_all(name).iter().enumerate() {
            if i > 0 {
                dst.put_u8(0);
            }
            dst.put_slice(value.as_bytes());
        }
        let value_len = (dst.len() - len_at - 4) as u32;
        dst[len_at..len_at + 4].copy_from_slice(&value_len.to_be_bytes());
    }
}

/// Reads an uncompressed header block; NUL-joined values become separate values.
pub fn decode_plain(mut block: &[u8]) -> Result<HeaderMap, HeaderBlockError> {
    fn take<'a>(block: &mut &'a [u8]) -> Result<&'a [u8], HeaderBlockError> {
        if block.remaining() < 4 {
            return Err(HeaderBlockError::Truncated);
        }
        let len = block.get_u32() as usize;
        if block.len() < len {
            return Err(HeaderBlockError::Truncated);
        }
        let (field, rest) = block.split_at(len);
        *block = rest;
        Ok(field)
    }
    if block.remaining() < 4 {
        return Err(HeaderBlockError::Truncated);
    }
    let count = block.get_u32() as usize;
    // Each field needs at least 8 bytes: a count beyond that is a lie, not an allocation hint.
    // The hint stays small besides (Kubernetes' blocks carry a handful of headers):
    // `with_capacity` panics past what a map can hold, where appending fails softly below.
    let mut headers = HeaderMap::with_capacity(count.min(block.len() / 8).min(64));
    for _ in 0..count {
        let name = take(&mut block)?;
        let name = HeaderName::from_bytes(name).map_err(|_| {
            HeaderBlockError::InvalidName(String::from_utf8_lossy(name).into_owned())
        })?;
        let values = take(&mut block)?;
        for value in values.split(|&b| b == 0) {
            let value = HeaderValue::from_bytes(value)
                .map_err(|_| HeaderBlockError::InvalidValue(name.to_string()))?;
            // NUL-separated values are entries of their own: a block of empty values could
            // ask for more than the map holds, where `append` would panic.
            headers
                .try_append(name.clone(), value)
                .map_err(|_| HeaderBlockError::TooManyValues)?;
        }
    }
    if !block.is_empty() {
        return Err(HeaderBlockError::TrailingBytes(block.len()));
    }
    Ok(headers)
}

/// One direction's compression context: every block we send, in order.
pub struct HeaderEncoder {
    zlib: Compress,
    plain: Vec<u8>,
    out: Vec<u8>,
}

impl Default for HeaderEncoder {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for HeaderEncoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HeaderEncoder").finish_non_exhaustive()
    }
}

impl HeaderEncoder {
    /// A fresh context (best compression, as spdystream).
    pub fn new() -> Self {
        Self {
            zlib: Compress::new(Compression::best(), true),
            plain: Vec::new(),
            out: Vec::new(),
        }
    }

    /// Appends the compressed, sync-flushed block for `headers` to `dst`.
    pub fn encode(
        &mut self,
        headers: &HeaderMap,
        dst: &mut BytesMut,
    ) -> Result<(), HeaderBlockError> {
        if self.zlib.total_in() == 0 && self.zlib.total_out() == 0 {
            self.zlib
                .set_dictionary(&DICTIONARY)
                .map_err(|e| HeaderBlockError::Compress(e.to_string()))?;
        }
        self.plain.clear();
        encode_plain(headers, &mut self.plain);
        let mut input = &self.plain[..];
        self.out.clear();
        loop {
            self.out.reserve(input.len() / 2 + 64);
            let room = self.out.capacity() - self.out.len();
            let (before_in, before_out) = (self.zlib.total_in(), self.zlib.total_out());
            self.zlib
                .compress_vec(input, &mut self.out, FlushCompress::Sync)
                .map_err(|e| HeaderBlockError::Compress(e.to_string()))?;
            input = &input[(self.zlib.total_in() - before_in) as usize..];
            let written = (self.zlib.total_out() - before_out) as usize;
            // The flush is complete once zlib stops short of the room it had.
            if input.is_empty() && written < room {
                dst.extend_from_slice(&self.out);
                return Ok(());
            }
        }
    }
}

/// One direction's decompression context: every block the peer sends, in order.
pub struct HeaderDecoder {
    zlib: Decompress,
    max_size: usize,
    plain: Vec<u8>,
}

impl std::fmt::Debug for HeaderDecoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HeaderDecoder")
            .field("max_size", &self.max_size)
            .finish_non_exhaustive()
    }
}

impl HeaderDecoder {
    /// A fresh context refusing blocks that inflate beyond `max_size` bytes.
    pub fn new(max_size: usize) -> Self {
        Self {
            zlib: Decompress::new(true),
            max_size,
            plain: Vec::new(),
        }
    }

    /// Inflates and parses one block.
    pub fn decode(&mut self, mut block: &[u8]) -> Result<HeaderMap, HeaderBlockError> {
        self.plain.clear();
        while !block.is_empty() {
            if self.plain.len() >= self.max_size {
                return Err(HeaderBlockError::TooLarge(self.max_size));
            }
            // Room for a good share of the block's expansion, but never past the limit: within
            // 256 bytes of it (or under a limit below 256), `clamp` would panic with its
            // minimum above its maximum.
            let room = self.max_size - self.plain.len();
            self.plain.reserve((block.len() * 4).max(256).min(room));
            let before_in = self.zlib.total_in();
            let result = self
                .zlib
                .decompress_vec(block, &mut self.plain, FlushDecompress::Sync);
            block = &block[(self.zlib.total_in() - before_in) as usize..];
            match result {
                Ok(Status::Ok) | Ok(Status::BufError) => {}
                Ok(Status::StreamEnd) if block.is_empty() => {}
                Ok(Status::StreamEnd) => {
                    return Err(HeaderBlockError::Decompress(
                        "zlib stream ended early".into(),
                    ));
                }
                Err(e) if e.needs_dictionary().is_some() => {
                    self.zlib
                        .set_dictionary(&DICTIONARY)
                        .map_err(|e| HeaderBlockError::Decompress(e.to_string()))?;
                }
                Err(e) => return Err(HeaderBlockError::Decompress(e.to_string())),
            }
        }
        // zlib may hold back output until asked again with room to spare.
        loop {
            if self.plain.len() > self.max_size {
                return Err(HeaderBlockError::TooLarge(self.max_size));
            }
            self.plain.reserve(256);
            let before = self.plain.len();
            self.zlib
                .decompress_vec(&[], &mut self.plain, FlushDecompress::Sync)
                .map_err(|e| HeaderBlockError::Decompress(e.to_string()))?;
            if self.plain.len() == before {
                break;
            }
        }
        if self.plain.len() > self.max_size {
            return Err(HeaderBlockError::TooLarge(self.max_size));
        }
        decode_plain(&self.plain)
    }
}
