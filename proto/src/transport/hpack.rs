//! An HPACK decoder (RFC 7541) for header blocks from clients we do not trust.
//!
//! Our own because none of the crates fit: h2 keeps its codec private, `loona-hpack`/`hpack`
//! build a hash-map Huffman table for every string (30 µs a request, measured), and
//! `httlib-hpack` panics on truncated input. Huffman strings are decoded by `httlib-huffman`'s
//! table-driven decoder. Every length and index is checked: bad input is an error, never a
//! panic, and the dynamic table never holds more than its size allows.

use std::collections::VecDeque;

/// RFC 7541 Appendix A.
const STATIC_TABLE: [(&[u8], &[u8]); 61] = [
    (b":authority", b""),
    (b":method", b"GET"),
    (b":method", b"POST"),
    (b":path", b"/"),
    (b":path", b"/index.html"),
    (b":scheme", b"http"),
    (b":scheme", b"https"),
    (b":status", b"200"),
    (b":status", b"204"),
    (b":status", b"206"),
    (b":status", b"304"),
    (b":status", b"400"),
    (b":status", b"404"),
    (b":status", b"500"),
    (b"accept-charset", b""),
    (b"accept-encoding", b"gzip, deflate"),
    (b"accept-language", b""),
    (b"accept-ranges", b""),
    (b"accept", b""),
    (b"access-control-allow-origin", b""),
    (b"age", b""),
    (b"allow", b""),
    (b"authorization", b""),
    (b"cache-control", b""),
    (b"content-disposition", b""),
    (b"content-encoding", b""),
    (b"content-language", b""),
    (b"content-length", b""),
    (b"content-location", b""),
    (b"content-range", b""),
    (b"content-type", b""),
    (b"cookie", b""),
    (b"date", b""),
    (b"etag", b""),
    (b"expect", b""),
    (b"expires", b""),
    (b"from", b""),
    (b"host", b""),
    (b"if-match", b""),
    (b"if-modified-since", b""),
    (b"if-none-match", b""),
    (b"if-range", b""),
    (b"if-unmodified-since", b""),
    (b"last-modified", b""),
    (b"link", b""),
    (b"location", b""),
    (b"max-forwards", b""),
    (b"proxy-authenticate", b""),
    (b"proxy-authorization", b""),
    (b"range", b""),
    (b"referer", b""),
    (b"refresh", b""),
    (b"retry-after", b""),
    (b"server", b""),
    (b"set-cookie", b""),
    (b"strict-transport-security", b""),
    (b"transfer-encoding", b""),
    (b"user-agent", b""),
    (b"vary", b""),
    (b"via", b""),
    (b"www-authenticate", b""),
];

/// The table size both ends start with (SETTINGS_HEADER_TABLE_SIZE's default).
pub(crate) const DEFAULT_TABLE_SIZE: usize = 4096;

/// What an entry costs in the table besides its bytes (RFC 7541 §4.1).
const ENTRY_OVERHEAD: usize = 32;

/// Why a header block could not be decoded; every one is a COMPRESSION_ERROR in HTTP/2.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HpackError {
    /// The block ends inside a representation.
    #[error("header block truncated")]
    Truncated,
    /// An integer longer than any we accept (more than 2^32).
    #[error("integer overflows")]
    IntegerOverflow,
    /// An index that is 0 or past the end of the static and dynamic tables.
    #[error("no table entry {0}")]
    BadIndex(usize),
    /// A dynamic table size update above the allowed maximum, or after a field.
    #[error("invalid dynamic table size update to {0}")]
    BadSizeUpdate(usize),
    /// A Huffman string that does not decode.
    #[error("invalid Huffman string")]
    Huffman,
}

/// The decoding side of one connection: its dynamic table.
#[derive(Debug)]
pub(crate) struct Decoder {
    /// Newest first, as indexes count.
    table: VecDeque<(Vec<u8>, Vec<u8>)>,
    /// Sum of the entries' sizes.
    size: usize,
    /// The size the encoder last set (starts at the default).
    max_size: usize,
    /// The most a size update may set: what the server allowed in its SETTINGS.
    limit: usize,
}

impl Decoder {
    /// A decoder whose table starts at the default size and may be resized up to `limit`.
    pub(crate) fn new(limit: usize) -> Self {
        Self {
            table: VecDeque::new(),
            size: 0,
            max_size: DEFAULT_TABLE_SIZE,
            limit,
        }
    }

    /// Decodes one whole header block, calling `field(name, value, never_indexed)` per field
    /// in order. The table may be partly updated when an error is returned; the connection is
    /// then unusable, as HTTP/2 says.
    pub(crate) fn decode(
        &mut self,
        mut block: &[u8],
        mut field: impl FnMut(&[u8], &[u8], bool),
    ) -> Result<(), HpackError> {
        let mut seen_field = false;
        let mut scratch = (Vec::new(), Vec::new());
        while let Some(&first) = block.first() {
            if first & 0x80 != 0 {
                let index = take_integer(&mut block, 7)?;
                let (name, value) = self.entry(index)?;
                field(name, value, false);
            } else if first & 0xe0 == 0x20 {
                let size = take_integer(&mut block, 5)?;
                if seen_field || size > self.limit {
                    return Err(HpackError::BadSizeUpdate(size));
                }
                self.max_size = size;
                self.evict_to(size);
                continue;
            } else {
                let (indexing, never, prefix) = match first {
                    b if b & 0xc0 == 0x40 => (true, false, 6),
                    b if b & 0xf0 == 0x10 => (false, true, 4),
                    _ => (false, false, 4),
                };
                let index = take_integer(&mut block, prefix)?;
                let (name, value) = &mut scratch;
                name.clear();
                value.clear();
                if index == 0 {
                    take_string(&mut block, name)?;
                } else {
                    name.extend_from_slice(self.entry(index)?.0);
                }
                take_string(&mut block, value)?;
                field(name, value, never);
                if indexing {
                    self.insert(name.clone(), value.clone());
                }
            }
            seen_field = true;
        }
        Ok(())
    }

    /// The entry at a combined static + dynamic index (1-based).
    fn entry(&self, index: usize) -> Result<(&[u8], &[u8]), HpackError> {
        if let Some(i) = index.checked_sub(1)
            && let Some(&(name, value)) = STATIC_TABLE.get(i)
        {
            return Ok((name, value));
        }
        index
            .checked_sub(STATIC_TABLE.len() + 1)
            .and_then(|i| self.table.get(i))
            .map(|(n, v)| (n.as_slice(), v.as_slice()))
            .ok_or(HpackError::BadIndex(index))
    }

    fn insert(&mut self, name: Vec<u8>, value: Vec<u8>) {
        let size = name.len() + value.len() + ENTRY_OVERHEAD;
        if size > self.max_size {
            // An entry larger than the table empties it and is not kept (RFC 7541 §4.4).
            self.table.clear();
            self.size = 0;
            return;
        }
        self.evict_to(self.max_size - size);
        self.table.push_front((name, value));
        self.size += size;
    }

    fn evict_to(&mut self, size: usize) {
        while self.size > size {
            let Some((n, v)) = self.table.pop_back() else {
                self.size = 0;
                return;
            };
            self.size -= n.len() + v.len() + ENTRY_OVERHEAD;
        }
    }
}

/// Takes an integer with an `n`-bit prefix (RFC 7541 §5.1) off the front of `block`.
fn take_integer(block: &mut &[u8], n: u8) -> Result<usize, HpackError> {
    let (&first, mut rest) = block.split_first().ok_or(HpackError::Truncated)?;
    let max = (1u16 << n) - 1;
    let mut value = u64::from(first) & u64::from(max);
    if value == u64::from(max) {
        let mut shift = 0u32;
        loop {
            let (&byte, tail) = rest.split_first().ok_or(HpackError::Truncated)?;
            rest = tail;
            value += u64::from(byte & 0x7f) << shift;
            if value > u64::from(u32::MAX) {
                return Err(HpackError::IntegerOverflow);
            }
            if byte & 0x80 == 0 {
                break;
            }
            shift += 7;
            if shift > 28 {
                // Five continuation bytes carry 2^35: more is padding we need not accept.
                return Err(HpackError::IntegerOverflow);
            }
        }
    }
    *block = rest;
    usize::try_from(value).map_err(|_| HpackError::IntegerOverflow)
}

/// Takes a string literal (RFC 7541 §5.2) off the front of `block` into `out`.
fn take_string(block: &mut &[u8], out: &mut Vec<u8>) -> Result<(), HpackError> {
    let huffman = block.first().is_some_and(|b| b & 0x80 != 0);
    let len = take_integer(block, 7)?;
    if len > block.len() {
        return Err(HpackError::Truncated);
    }
    let (bytes, rest) = block.split_at(len);
    *block = rest;
    if huffman {
        httlib_huffman::decode(bytes, out, httlib_huffman::DecoderSpeed::FiveBits)
            .map_err(|_| HpackError::Huffman)
    } else {
        out.extend_from_slice(bytes);
        Ok(())
    }
}

#[cfg(test)]
mod tests;
