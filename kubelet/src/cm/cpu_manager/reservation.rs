//! How many CPUs the static policy keeps from exclusive use, from the kubelet's settings as
//! Go computes it: `reservedSystemCPUs` when set (it then replaces the CPU of
//! kubeReserved + systemReserved), else the ceiling of kubeReserved cpu + systemReserved cpu.

use super::cpuset::{CpuSet, CpuSetParseError};
use crate::cm::settings::Settings;
use crate::manifest::quantity::{QuantityError, parse_quantity};

/// Why the reservation is unusable (texts as Go's start-up checks).
#[derive(Debug, thiserror::Error)]
pub enum ReservationError {
    /// `reservedSystemCPUs` is not a CPU list.
    #[error("unable to parse reserved-cpus list: {0}")]
    ReservedCpus(#[source] CpuSetParseError),
    /// `reservedSystemCPUs` names CPUs that are not online.
    #[error("reserved-cpus: {list} is not a subset of online-cpus: {online}")]
    NotOnline {
        /// As configured.
        list: String,
        /// The online CPUs.
        online: CpuSet,
    },
    /// A reserved cpu quantity does not parse or is negative.
    #[error("--{which} value failed to parse: cpu {value:?}: {reason}")]
    Quantity {
        /// `kube-reserved` or `system-reserved`.
        which: &'static str,
        /// As configured.
        value: String,
        /// Why.
        reason: String,
    },
}

/// The CPU reservation the CPU manager is given.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CpuReservation {
    /// kubeReserved cpu + systemReserved cpu in millicores (Go's node allocatable
    /// reservation for cpu).
    pub milli_cpu: i64,
    /// `reservedSystemCPUs`: when not empty, exactly these CPUs are reserved.
    pub cpus: CpuSet,
}

impl CpuReservation {
    /// The reservation `settings` ask for, checked against the CPUs online.
    pub fn from_settings(settings: &Settings, online: &CpuSet) -> Result<Self, ReservationError> {
        if !settings.reserved_system_cpus.is_empty() {
            let cpus = CpuSet::parse(&settings.reserved_system_cpus)
                .map_err(ReservationError::ReservedCpus)?;
            if !cpus.is_subset(online) {
                return Err(ReservationError::NotOnline {
                    list: settings.reserved_system_cpus.clone(),
                    online: online.clone(),
                });
            }
            if !cpus.is_empty() {
                let milli_cpu = i64::try_from(cpus.len()).unwrap_or(i64::MAX) * 1000;
                return Ok(Self { milli_cpu, cpus });
            }
        }
        let mut nanos = 0i128;
        for (which, map) in [
            ("kube-reserved", &settings.kube_reserved),
            ("system-reserved", &settings.system_reserved),
        ] {
            let Some(value) = map.get("cpu") else {
                continue;
            };
            let error = |reason: String| ReservationError::Quantity {
                which,
                value: value.clone(),
                reason,
            };
            let q = parse_quantity(value).map_err(|e: QuantityError| error(e.to_string()))?;
            if q.is_negative() {
                return Err(error("cannot be negative".into()));
            }
            nanos += q.nanos();
        }
        // Go: MilliValue() of the sum, rounded up.
        let milli = (nanos + 999_999) / 1_000_000;
        Ok(Self {
            milli_cpu: i64::try_from(milli).unwrap_or(i64::MAX),
            cpus: CpuSet::new(),
        })
    }

    /// CPUs to reserve: the ceiling of the millicores (Go's `numReservedCPUs`).
    pub fn num_cpus(&self) -> usize {
        let whole = self.milli_cpu.max(0).unsigned_abs().div_ceil(1000);
        usize::try_from(whole).unwrap_or(usize::MAX)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn settings(kube: Option<&str>, system: Option<&str>, cpus: &str) -> Settings {
        let mut s = Settings::default();
        if let Some(k) = kube {
            s.kube_reserved.insert("cpu".into(), k.into());
        }
        if let Some(v) = system {
            s.system_reserved.insert("cpu".into(), v.into());
        }
        s.kube_reserved.insert("memory".into(), "1Gi".into());
        s.reserved_system_cpus = cpus.into();
        s
    }

    #[test]
    fn sums_and_rounds_up_as_go() {
        let online = CpuSet::parse("0-3").unwrap();
        let r = |k, s| CpuReservation::from_settings(&settings(k, s, ""), &online).unwrap();
        assert_eq!(r(None, None).milli_cpu, 0);
        assert_eq!(r(None, None).num_cpus(), 0);
        assert_eq!(r(Some("500m"), None).num_cpus(), 1);
        assert_eq!(r(Some("500m"), Some("600m")).milli_cpu, 1100);
        assert_eq!(r(Some("500m"), Some("600m")).num_cpus(), 2);
        assert_eq!(r(Some("1"), Some("1")).num_cpus(), 2);
        assert_eq!(r(Some("0.0001"), None).milli_cpu, 1);
    }

    #[test]
    fn reserved_system_cpus_win() {
        let online = CpuSet::parse("0-3").unwrap();
        let r = CpuReservation::from_settings(&settings(Some("3"), None, "1,3"), &online).unwrap();
        assert_eq!(r.cpus.to_string(), "1,3");
        assert_eq!((r.milli_cpu, r.num_cpus()), (2000, 2));
        let err = CpuReservation::from_settings(&settings(None, None, "2-5"), &online)
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "reserved-cpus: 2-5 is not a subset of online-cpus: 0-3"
        );
        assert!(matches!(
            CpuReservation::from_settings(&settings(None, None, "x"), &online),
            Err(ReservationError::ReservedCpus(_))
        ));
        assert!(matches!(
            CpuReservation::from_settings(&settings(Some("-1"), None, ""), &online),
            Err(ReservationError::Quantity { .. })
        ));
    }
}
