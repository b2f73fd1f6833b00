//! A set of logical CPU ids with the kernel's list form (`0-3,5,7-8`), as Go's
//! `k8s.io/utils/cpuset`: the form of `cpuset.cpus`, CRI's `cpuset_cpus` and the CPU
//! manager's state file.

use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;

/// Most CPUs one range may name. Go has no bound (it would try to allocate the whole range);
/// Linux supports at most 8192 CPUs, so a wider range can only come from a damaged file.
const MAX_RANGE_LEN: u64 = 1 << 16;

/// Why a CPU list did not parse; the texts are Go's (`strconv.Atoi` and `cpuset.Parse`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CpuSetParseError {
    /// An element is not a number.
    #[error("strconv.Atoi: parsing {0:?}: invalid syntax")]
    InvalidSyntax(String),
    /// An element does not fit a CPU id.
    #[error("strconv.Atoi: parsing {0:?}: value out of range")]
    OutOfRange(String),
    /// A range whose start is above its end.
    #[error("invalid range {range:?} ({start} > {end})")]
    InvalidRange {
        /// The range as written.
        range: String,
        /// Its first id.
        start: u32,
        /// Its last id.
        end: u32,
    },
    /// A range naming more CPUs than any machine has (ours: Go would try to hold them all).
    #[error("range {0:?} names more than {MAX_RANGE_LEN} CPUs")]
    TooWide(String),
}

/// A sorted set of logical CPU ids.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct CpuSet(BTreeSet<u32>);

impl CpuSet {
    /// The empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Parses the kernel's list form; "" is the empty set (Go's `cpuset.Parse`).
    pub fn parse(s: &str) -> Result<Self, CpuSetParseError> {
        let mut set = BTreeSet::new();
        if s.is_empty() {
            return Ok(Self(set));
        }
        for element in s.split(',') {
            match element.split_once('-') {
                None => {
                    set.insert(parse_id(element)?);
                }
                Some((a, b)) => {
                    let (start, end) = (parse_id(a)?, parse_id(b)?);
                    if start > end {
                        return Err(CpuSetParseError::InvalidRange {
                            range: element.to_string(),
                            start,
                            end,
                        });
                    }
                    if u64::from(end - start) >= MAX_RANGE_LEN {
                        return Err(CpuSetParseError::TooWide(element.to_string()));
                    }
                    set.extend(start..=end);
                }
            }
        }
        Ok(Self(set))
    }

    /// How many CPUs.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// No CPU at all.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether `cpu` is in the set.
    pub fn contains(&self, cpu: u32) -> bool {
        self.0.contains(&cpu)
    }

    /// The ids, ascending.
    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.0.iter().copied()
    }

    /// The lowest id.
    pub fn first(&self) -> Option<u32> {
        self.0.first().copied()
    }

    /// CPUs in either set.
    pub fn union(&self, other: &CpuSet) -> CpuSet {
        Self(self.0.union(&other.0).copied().collect())
    }

    /// CPUs in `self` and not in `other`.
    pub fn difference(&self, other: &CpuSet) -> CpuSet {
        Self(self.0.difference(&other.0).copied().collect())
    }

    /// CPUs in both sets.
    pub fn intersection(&self, other: &CpuSet) -> CpuSet {
        Self(self.0.intersection(&other.0).copied().collect())
    }

    /// Every CPU of `self` is in `other`.
    pub fn is_subset(&self, other: &CpuSet) -> bool {
        self.0.is_subset(&other.0)
    }

    /// Adds one CPU.
    pub fn insert(&mut self, cpu: u32) {
        self.0.insert(cpu);
    }
}

/// One element of a list: Go's `strconv.Atoi`, which also takes a leading `+`.
fn parse_id(s: &str) -> Result<u32, CpuSetParseError> {
    let digits = s.strip_prefix('+').unwrap_or(s);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(CpuSetParseError::InvalidSyntax(s.to_string()));
    }
    digits
        .parse()
        .map_err(|_| CpuSetParseError::OutOfRange(s.to_string()))
}

impl FromIterator<u32> for CpuSet {
    fn from_iter<I: IntoIterator<Item = u32>>(iter: I) -> Self {
        Self(iter.into_iter().collect())
    }
}

impl FromStr for CpuSet {
    type Err = CpuSetParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

/// Go's `CPUSet.String`: ascending, runs of two or more as `a-b`, "" when empty.
impl fmt::Display for CpuSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut ids = self.iter().peekable();
        let mut first = true;
        while let Some(start) = ids.next() {
            let mut end = start;
            while ids.peek() == Some(&(end + 1)) {
                end += 1;
                ids.next();
            }
            if !first {
                f.write_str(",")?;
            }
            first = false;
            if start == end {
                write!(f, "{start}")?;
            } else {
                write!(f, "{start}-{end}")?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn set(ids: &[u32]) -> CpuSet {
        ids.iter().copied().collect()
    }

    #[test]
    fn text_form_both_ways() {
        // Go's cpuset_test.go TestCPUSetString / TestParse cases.
        let cases: &[(&str, &[u32])] = &[
            ("", &[]),
            ("5", &[5]),
            ("1-2", &[1, 2]),
            ("0-5", &[0, 1, 2, 3, 4, 5]),
            ("1,3-5,7", &[1, 3, 4, 5, 7]),
            ("0,2-3,5,7-8", &[0, 2, 3, 5, 7, 8]),
        ];
        for (text, ids) in cases {
            assert_eq!(CpuSet::parse(text).unwrap(), set(ids), "{text}");
            assert_eq!(set(ids).to_string(), *text);
        }
        // Go accepts unsorted, overlapping and degenerate elements.
        assert_eq!(
            CpuSet::parse("7,1-3,2,4-4,+9").unwrap().to_string(),
            "1-4,7,9"
        );
    }

    #[test]
    fn parse_errors_are_gos() {
        let err = |s: &str| CpuSet::parse(s).unwrap_err().to_string();
        assert_eq!(err("1.3"), r#"strconv.Atoi: parsing "1.3": invalid syntax"#);
        assert_eq!(err("asd"), r#"strconv.Atoi: parsing "asd": invalid syntax"#);
        assert_eq!(err("-1"), r#"strconv.Atoi: parsing "": invalid syntax"#);
        assert_eq!(err("1,"), r#"strconv.Atoi: parsing "": invalid syntax"#);
        assert_eq!(
            err("1-2-3"),
            r#"strconv.Atoi: parsing "2-3": invalid syntax"#
        );
        assert_eq!(err("5-3"), r#"invalid range "5-3" (5 > 3)"#);
        assert_eq!(
            err("99999999999"),
            r#"strconv.Atoi: parsing "99999999999": value out of range"#
        );
        assert!(matches!(
            CpuSet::parse("0-4000000000"),
            Err(CpuSetParseError::TooWide(_))
        ));
    }

    #[test]
    fn set_operations() {
        let a = set(&[0, 1, 2, 5]);
        let b = set(&[2, 3, 5]);
        assert_eq!(a.union(&b), set(&[0, 1, 2, 3, 5]));
        assert_eq!(a.difference(&b), set(&[0, 1]));
        assert_eq!(a.intersection(&b), set(&[2, 5]));
        assert!(set(&[2, 5]).is_subset(&a));
        assert!(!b.is_subset(&a));
        assert!(CpuSet::new().is_subset(&a));
        assert_eq!(a.len(), 4);
        assert_eq!(a.first(), Some(0));
        assert!(CpuSet::new().is_empty());
    }
}
