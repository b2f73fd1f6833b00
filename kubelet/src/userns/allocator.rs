//! Which of the kubelet's per-pod ranges are taken, and by whom (Go's allocation bitmap and
//! `usedBy` map).

use std::collections::HashMap;

use super::UsernsError;

/// The kubelet's id space cut into ranges of `len` ids, the first `off` ranges not ours.
#[derive(Debug)]
pub(super) struct Allocator {
    /// Ids per pod.
    len: u32,
    /// Index of our first range (our first id / len).
    off: u32,
    /// One per range of ours: taken or free.
    used: Vec<bool>,
    /// Pod UID → first host id.
    by_pod: HashMap<String, u32>,
}

impl Allocator {
    /// Ranges of `len` ids from `first` for `count` ids (both multiples of `len`).
    pub(super) fn new(first: u32, count: u32, len: u32) -> Self {
        Self {
            len,
            off: first / len,
            used: vec![false; (count / len) as usize],
            by_pod: HashMap::new(),
        }
    }

    /// Ids per pod.
    pub(super) fn len(&self) -> u32 {
        self.len
    }

    /// The first host id of `uid`'s range, if it has one.
    pub(super) fn of(&self, uid: &str) -> Option<u32> {
        self.by_pod.get(uid).copied()
    }

    /// The pods that hold a range.
    pub(super) fn pods(&self) -> Vec<String> {
        self.by_pod.keys().cloned().collect()
    }

    /// Takes the lowest free range for `uid`; its first host id.
    pub(super) fn allocate(&mut self, uid: &str) -> Result<u32, UsernsError> {
        if let Some(first) = self.of(uid) {
            return Ok(first);
        }
        let index = self
            .used
            .iter()
            .position(|u| !u)
            .ok_or(UsernsError::Exhausted)?;
        self.used[index] = true;
        let first = (index as u32 + self.off) * self.len;
        self.by_pod.insert(uid.to_string(), first);
        Ok(first)
    }

    /// Records `uid`'s range read back from its file (Go's `record`).
    pub(super) fn record(&mut self, uid: &str, from: u32, length: u32) -> Result<(), UsernsError> {
        let bad = |why: String| UsernsError::BadRecord {
            uid: uid.to_string(),
            why,
        };
        if length != self.len {
            return Err(bad(format!("wrong user namespace length {length}")));
        }
        if !from.is_multiple_of(self.len) {
            return Err(bad(format!("wrong user namespace offset specified {from}")));
        }
        match self.of(uid) {
            Some(prev) if prev == from => return Ok(()),
            Some(_) => {
                return Err(bad(format!(
                    "different user namespace range already used by pod {uid:?}"
                )));
            }
            None => {}
        }
        let index = (from / self.len)
            .checked_sub(self.off)
            .map(|i| i as usize)
            .filter(|i| *i < self.used.len())
            .ok_or_else(|| bad(format!("id {from} is out of range")))?;
        if self.used[index] {
            return Err(bad(format!("range picked for pod {uid:?} already taken")));
        }
        self.used[index] = true;
        self.by_pod.insert(uid.to_string(), from);
        Ok(())
    }

    /// Frees `uid`'s range; whether it had one.
    pub(super) fn release(&mut self, uid: &str) -> bool {
        let Some(first) = self.by_pod.remove(uid) else {
            return false;
        };
        if let Some(slot) = (first / self.len)
            .checked_sub(self.off)
            .and_then(|i| self.used.get_mut(i as usize))
        {
            *slot = false;
        }
        true
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    const L: u32 = 65536;

    #[test]
    fn ranges_are_disjoint_reused_and_run_out() {
        let mut a = Allocator::new(L, 3 * L, L);
        let x = a.allocate("x").unwrap();
        let y = a.allocate("y").unwrap();
        assert_eq!((x, y), (L, 2 * L));
        assert_eq!(a.allocate("x").unwrap(), x, "the same pod keeps its range");
        assert_eq!(a.allocate("z").unwrap(), 3 * L);
        assert!(matches!(a.allocate("w"), Err(UsernsError::Exhausted)));
        assert!(a.release("y"));
        assert!(!a.release("y"));
        assert_eq!(
            a.allocate("w").unwrap(),
            2 * L,
            "a freed range is taken again"
        );
    }

    #[test]
    fn records_are_checked_like_go() {
        let mut a = Allocator::new(L, 4 * L, L);
        a.record("x", 3 * L, L).unwrap();
        a.record("x", 3 * L, L).unwrap();
        let msg = |r: Result<(), UsernsError>| r.unwrap_err().to_string();
        assert!(msg(a.record("x", 2 * L, L)).contains("different user namespace range"));
        assert!(msg(a.record("y", 3 * L, L)).contains("already taken"));
        assert!(msg(a.record("y", 3 * L + 1, L)).contains("wrong user namespace offset"));
        assert!(msg(a.record("y", 2 * L, 2 * L)).contains("wrong user namespace length"));
        assert!(msg(a.record("y", 0, L)).contains("out of range"));
        assert!(msg(a.record("y", 5 * L, L)).contains("out of range"));
        assert_eq!(a.allocate("y").unwrap(), L);
        assert_eq!(a.allocate("z").unwrap(), 2 * L);
        assert_eq!(a.allocate("v").unwrap(), 4 * L);
    }
}
