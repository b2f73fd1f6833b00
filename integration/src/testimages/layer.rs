//! Layer contents and their deterministic tar + gzip encoding.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::io::{self, Read, Write};

use sha2::{Digest, Sha256};

// Any fixed non-zero seed works; xorshift only needs the state never to be zero.
const NOISE_SEED: u64 = 0x9e37_79b9_7f4a_7c15;

/// What a path in a layer is.
pub(super) enum Body<'a> {
    Dir,
    File(Cow<'a, [u8]>),
    Symlink(String),
    /// `len` bytes of deterministic incompressible data.
    Noise(u64),
}

struct Node<'a> {
    mode: u32,
    owner: u64,
    body: Body<'a>,
}

/// One layer's entries, keyed by path so the tar comes out sorted (parents before children,
/// since a parent's path is a prefix of its children's).
pub(super) struct Layer<'a> {
    pub(super) created_by: String,
    pub(super) level: u32,
    nodes: BTreeMap<String, Node<'a>>,
}

impl<'a> Layer<'a> {
    pub(super) fn new(created_by: &str, level: u32) -> Self {
        Self {
            created_by: created_by.to_owned(),
            level,
            nodes: BTreeMap::new(),
        }
    }

    pub(super) fn insert(&mut self, path: &str, mode: u32, owner: u64, body: Body<'a>) {
        self.nodes
            .insert(path.to_owned(), Node { mode, owner, body });
    }

    pub(super) fn dir(&mut self, path: &str, mode: u32, owner: u64) {
        self.insert(path, mode, owner, Body::Dir);
    }

    pub(super) fn file(&mut self, path: &str, mode: u32, owner: u64, data: Cow<'a, [u8]>) {
        self.insert(path, mode, owner, Body::File(data));
    }

    pub(super) fn text(&mut self, path: &str, text: &'static str) {
        self.file(path, 0o644, 0, Cow::Borrowed(text.as_bytes()));
    }

    pub(super) fn symlink(&mut self, path: &str, target: &str) {
        self.insert(path, 0o777, 0, Body::Symlink(target.to_owned()));
    }

    /// Streams the layer as a tar into `out`; returns `(sha256 hex, bytes)` of the tar.
    pub(super) fn write_tar<W: Write>(&self, out: W) -> io::Result<(W, String, u64)> {
        let mut tar = tar::Builder::new(Hashing::new(out));
        for (path, node) in &self.nodes {
            let mut header = tar::Header::new_ustar();
            header.set_mode(node.mode);
            header.set_uid(node.owner);
            header.set_gid(node.owner);
            header.set_mtime(0);
            header.set_device_major(0)?;
            header.set_device_minor(0)?;
            let (kind, size) = match &node.body {
                Body::Dir => (tar::EntryType::Directory, 0),
                Body::File(data) => (tar::EntryType::Regular, data.len() as u64),
                Body::Symlink(_) => (tar::EntryType::Symlink, 0),
                Body::Noise(len) => (tar::EntryType::Regular, *len),
            };
            header.set_entry_type(kind);
            header.set_size(size);
            match &node.body {
                Body::Dir => header.set_path(format!("{path}/"))?,
                _ => header.set_path(path)?,
            }
            if let Body::Symlink(target) = &node.body {
                header.set_link_name(target)?;
            }
            header.set_cksum();
            match &node.body {
                Body::File(data) => tar.append(&header, &data[..])?,
                Body::Noise(len) => tar.append(&header, Noise::new(NOISE_SEED, *len))?,
                Body::Dir | Body::Symlink(_) => tar.append(&header, io::empty())?,
            }
        }
        Ok(tar.into_inner()?.finish())
    }
}

/// A writer that hashes and counts what passes through it.
pub(super) struct Hashing<W> {
    inner: W,
    hasher: Sha256,
    len: u64,
}

impl<W: Write> Hashing<W> {
    pub(super) fn new(inner: W) -> Self {
        Self {
            inner,
            hasher: Sha256::new(),
            len: 0,
        }
    }

    pub(super) fn finish(self) -> (W, String, u64) {
        (self.inner, hex::encode(self.hasher.finalize()), self.len)
    }
}

impl<W: Write> Write for Hashing<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        self.len += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// xorshift64* output as little-endian bytes; the stream depends only on seed and position,
/// never on how callers slice their reads.
struct Noise {
    state: u64,
    word: [u8; 8],
    pos: u64,
    len: u64,
}

impl Noise {
    fn new(seed: u64, len: u64) -> Self {
        Self {
            state: seed,
            word: [0; 8],
            pos: 0,
            len,
        }
    }

    fn next_word(&mut self) -> [u8; 8] {
        let mut x = self.state;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.state = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d).to_le_bytes()
    }
}

impl Read for Noise {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = usize::try_from(self.len - self.pos).map_or(buf.len(), |left| left.min(buf.len()));
        let mut i = 0;
        while i < n {
            let offset = (self.pos % 8) as usize;
            if offset == 0 && n - i >= 8 {
                // Whole words at a time: byte-wise is too slow for 64 MiB in a debug build.
                let word = self.next_word();
                buf[i..i + 8].copy_from_slice(&word);
                i += 8;
                self.pos += 8;
                continue;
            }
            if offset == 0 {
                self.word = self.next_word();
            }
            buf[i] = self.word[offset];
            i += 1;
            self.pos += 1;
        }
        Ok(n)
    }
}
