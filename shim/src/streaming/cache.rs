//! The request cache behind the streaming URLs, as the Go CRI streaming server keeps it
//! (`k8s.io/kubelet/pkg/cri/streaming/request_cache.go`): an Exec, Attach or PortForward
//! request is stored under a random single-use token that expires after [`TOKEN_TTL`]; at
//! most [`MAX_IN_FLIGHT`] wait at once, so a client that asks for URLs and never uses them
//! cannot grow it without bound.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use base64::Engine;

/// How long a URL stays usable.
pub const TOKEN_TTL: Duration = Duration::from_secs(60);

/// Requests waiting for their URL to be used, at most.
pub const MAX_IN_FLIGHT: usize = 1000;

/// Characters in a token (6 random bytes, URL-safe base64 without padding), as Go's.
pub const TOKEN_LEN: usize = 8;

/// The cache is full.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("maximum number of in-flight requests exceeded")]
pub struct TooManyInFlight;

struct Entry<T> {
    request: T,
    expires: Instant,
}

struct State<T> {
    entries: HashMap<String, Entry<T>>,
    /// Tokens in insertion order (so in expiry order: the TTL is fixed); a consumed token
    /// stays here until it reaches the front, where it is skipped.
    order: VecDeque<(Instant, String)>,
}

/// Single-use, expiring tokens for cached requests.
pub struct RequestCache<T> {
    ttl: Duration,
    max: usize,
    state: Mutex<State<T>>,
}

impl<T> Default for RequestCache<T> {
    fn default() -> Self {
        Self::new(TOKEN_TTL, MAX_IN_FLIGHT)
    }
}

impl<T> RequestCache<T> {
    /// A cache with its own TTL and bound (tests; the server uses [`Default`]).
    pub fn new(ttl: Duration, max: usize) -> Self {
        Self {
            ttl,
            max,
            state: Mutex::new(State {
                entries: HashMap::new(),
                order: VecDeque::new(),
            }),
        }
    }

    /// Stores `request` and returns its token.
    pub fn insert(&self, request: T) -> Result<String, TooManyInFlight> {
        self.insert_at(request, Instant::now())
    }

    /// Takes the request out; `None` when the token is unknown, used or expired.
    pub fn consume(&self, token: &str) -> Option<T> {
        self.consume_at(token, Instant::now())
    }

    /// Drops the requests whose tokens expired.
    pub fn drop_expired(&self) {
        self.lock().drop_expired(Instant::now());
    }

    /// Requests waiting (expired ones included until the next insert drops them).
    pub fn len(&self) -> usize {
        self.lock().entries.len()
    }

    /// Whether none wait.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State<T>> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn insert_at(&self, request: T, now: Instant) -> Result<String, TooManyInFlight> {
        let mut s = self.lock();
        s.drop_expired(now);
        if s.entries.len() >= self.max {
            return Err(TooManyInFlight);
        }
        let token = loop {
            let t = new_token();
            if !s.entries.contains_key(&t) {
                break t;
            }
        };
        let expires = now + self.ttl;
        s.entries.insert(token.clone(), Entry { request, expires });
        s.order.push_back((expires, token.clone()));
        Ok(token)
    }

    fn consume_at(&self, token: &str, now: Instant) -> Option<T> {
        let entry = self.lock().entries.remove(token)?;
        (now <= entry.expires).then_some(entry.request)
    }
}

impl<T> State<T> {
    fn drop_expired(&mut self, now: Instant) {
        while let Some((expires, _)) = self.order.front() {
            if *expires >= now {
                break;
            }
            if let Some((expires, token)) = self.order.pop_front() {
                // A token consumed and then reissued carries a later expiry: keep that one.
                if self
                    .entries
                    .get(&token)
                    .is_some_and(|e| e.expires == expires)
                {
                    self.entries.remove(&token);
                }
            }
        }
        // Consumed tokens linger in `order` until they expire; bound that too.
        if self.order.len() > 2 * self.entries.len() + 64 {
            let entries = &self.entries;
            self.order
                .retain(|(exp, t)| entries.get(t).is_some_and(|e| e.expires == *exp));
        }
    }
}

/// 6 bytes from the kernel's generator as 8 URL-safe characters.
fn new_token() -> String {
    let mut raw = [0u8; TOKEN_LEN * 6 / 8];
    if let Err(e) = getrandom(&mut raw) {
        // Never a guessable token: fall back to a fresh 64-hex-digit id's bytes.
        tracing::warn!(error = %e, "reading random bytes for a streaming token");
        let id = crate::store::new_id();
        for (i, b) in raw.iter_mut().enumerate() {
            *b = u8::from_str_radix(id.get(2 * i..2 * i + 2).unwrap_or("00"), 16).unwrap_or(0);
        }
    }
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw)
}

fn getrandom(buf: &mut [u8]) -> std::io::Result<()> {
    let mut filled = 0;
    while filled < buf.len() {
        // SAFETY: the pointer and length describe the unfilled tail of `buf`.
        let n =
            unsafe { libc::getrandom(buf[filled..].as_mut_ptr().cast(), buf.len() - filled, 0) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::Interrupted {
                return Err(e);
            }
            continue;
        }
        filled += n as usize;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn tokens_are_url_safe_and_distinct() {
        let c = RequestCache::default();
        let mut seen = std::collections::HashSet::new();
        for i in 0..500 {
            let t = c.insert(i).unwrap();
            assert_eq!(t.len(), TOKEN_LEN);
            assert!(
                t.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'),
                "{t}"
            );
            assert!(seen.insert(t));
        }
        assert_eq!(c.len(), 500);
    }

    #[test]
    fn a_token_is_used_once() {
        let c = RequestCache::default();
        let t = c.insert("exec").unwrap();
        assert_eq!(c.consume(&t), Some("exec"));
        assert_eq!(c.consume(&t), None);
        assert_eq!(c.consume("nonsense"), None);
        assert!(c.is_empty());
    }

    #[test]
    fn a_token_expires_after_the_ttl() {
        let c = RequestCache::new(Duration::from_secs(60), 10);
        let t0 = Instant::now();
        let fresh = c.insert_at(1, t0).unwrap();
        let stale = c.insert_at(2, t0).unwrap();
        assert_eq!(c.consume_at(&fresh, t0 + Duration::from_secs(60)), Some(1));
        assert_eq!(c.consume_at(&stale, t0 + Duration::from_secs(61)), None);
        // Expired entries are dropped by the next insert.
        let _ = c.insert_at(3, t0).unwrap();
        let _ = c.insert_at(4, t0 + Duration::from_secs(120)).unwrap();
        assert_eq!(c.len(), 1);
    }

    #[test]
    fn at_most_max_in_flight_and_expiry_makes_room() {
        let c = RequestCache::new(Duration::from_secs(60), 3);
        let t0 = Instant::now();
        let first = c.insert_at(0, t0).unwrap();
        c.insert_at(1, t0 + Duration::from_secs(1)).unwrap();
        c.insert_at(2, t0 + Duration::from_secs(2)).unwrap();
        assert_eq!(
            c.insert_at(3, t0 + Duration::from_secs(3)),
            Err(TooManyInFlight)
        );
        // Using a URL frees its place.
        assert_eq!(c.consume_at(&first, t0 + Duration::from_secs(3)), Some(0));
        c.insert_at(3, t0 + Duration::from_secs(3)).unwrap();
        assert!(c.insert_at(4, t0 + Duration::from_secs(4)).is_err());
        // So does expiry: the one from t0+1 is gone at t0+62.
        c.insert_at(4, t0 + Duration::from_secs(62)).unwrap();
        assert_eq!(c.len(), 3);
        assert_eq!(
            TooManyInFlight.to_string(),
            "maximum number of in-flight requests exceeded"
        );
    }

    #[test]
    fn the_default_bound_is_go_s() {
        let c = RequestCache::default();
        for i in 0..MAX_IN_FLIGHT {
            c.insert(i).unwrap();
        }
        assert_eq!(c.insert(0), Err(TooManyInFlight));
    }

    #[test]
    fn consumed_tokens_do_not_pile_up_in_the_order_queue() {
        let c = RequestCache::new(Duration::from_secs(60), 10);
        let t0 = Instant::now();
        for _ in 0..10_000 {
            let t = c.insert_at((), t0).unwrap();
            c.consume_at(&t, t0).unwrap();
        }
        assert!(c.lock().order.len() <= 64 + 1);
    }
}
