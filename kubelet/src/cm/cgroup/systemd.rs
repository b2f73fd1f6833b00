//! The systemd driver's half that talks to systemd: each cgroup of the kubelet's tree is a
//! transient slice unit made, changed and stopped over systemd's D-Bus API, as runc's
//! `cgroups/systemd` does for the Go kubelet. systemd owns a unit's cgroup and rewrites its
//! files from the unit's properties whenever it realizes the tree again, so every limit is
//! given to systemd as a property as well as written to the file.
//!
//! The manager is synchronous (it runs in blocking tasks); the calls run on the runtime the
//! connection was made on.

use std::time::{Duration, Instant};

use zbus::zvariant::{OwnedObjectPath, Value};

use super::v2::cpu_shares_to_weight;
use crate::cm::ResourceConfig;

const DESTINATION: &str = "org.freedesktop.systemd1";
const MANAGER_PATH: &str = "/org/freedesktop/systemd1";
const MANAGER: &str = "org.freedesktop.systemd1.Manager";
const UNIT: &str = "org.freedesktop.systemd1.Unit";
const NO_SUCH_UNIT: &str = "org.freedesktop.systemd1.NoSuchUnit";
/// How long a unit may take to start or stop (runc waits 30 s for the job).
const JOB_TIMEOUT: Duration = Duration::from_secs(30);
/// `infinity` in systemd's u64 properties.
const INFINITY: u64 = u64::MAX;

/// Why systemd did not do what was asked.
#[derive(Debug, thiserror::Error)]
pub enum SystemdError {
    /// No connection to systemd (not PID 1, or its sockets are not reachable).
    #[error("connecting to systemd over the D-Bus system bus: {0}")]
    Connect(String),
    /// A D-Bus call failed.
    #[error("systemd {method} of unit {unit}: {message}")]
    Call {
        /// The method called.
        method: &'static str,
        /// The unit it was about.
        unit: String,
        /// What systemd or the bus said.
        message: String,
    },
    /// A unit did not reach the state in time, or failed.
    #[error("systemd unit {unit}: {message}")]
    Unit {
        /// The unit.
        unit: String,
        /// What went wrong.
        message: String,
    },
    /// Called outside the runtime it needs.
    #[error("the systemd driver needs the tokio runtime: {0}")]
    NoRuntime(String),
}

/// A connection to systemd's manager.
#[derive(Clone, Debug)]
pub struct Systemd {
    connection: zbus::Connection,
    runtime: tokio::runtime::Handle,
}

impl Systemd {
    /// Connects from a blocking task (or a plain thread inside the runtime's context).
    pub fn connect() -> Result<Systemd, SystemdError> {
        let runtime = tokio::runtime::Handle::try_current()
            .map_err(|e| SystemdError::NoRuntime(e.to_string()))?;
        // The system bus, not systemd's private socket: over that one systemd names itself as
        // the sender, which a bus client does not take for a peer's unique name.
        let connection = runtime
            .block_on(zbus::Connection::system())
            .map_err(|e| SystemdError::Connect(e.to_string()))?;
        Ok(Systemd {
            connection,
            runtime,
        })
    }

    /// Starts slice `unit` (a child of slice `parent`) with `config`'s limits and waits
    /// until it is active. One already active is only given the limits.
    pub fn start_slice(
        &self,
        unit: &str,
        parent: &str,
        config: &ResourceConfig,
    ) -> Result<(), SystemdError> {
        if self.active_state(unit)?.as_deref() == Some("active") {
            return self.set_properties(unit, config);
        }
        let description = format!("ferrolet cgroup {unit}");
        let mut properties: Vec<(&str, Value<'_>)> = vec![
            ("Description", Value::from(description.as_str())),
            ("Wants", Value::from(vec![parent])),
            ("DefaultDependencies", Value::from(false)),
            ("MemoryAccounting", Value::from(true)),
            ("CPUAccounting", Value::from(true)),
            ("IOAccounting", Value::from(true)),
            ("TasksAccounting", Value::from(true)),
        ];
        properties.extend(resource_properties(config));
        let aux: Vec<(&str, Vec<(&str, Value<'_>)>)> = Vec::new();
        self.call::<OwnedObjectPath, _>(
            "StartTransientUnit",
            unit,
            &(unit, "replace", properties, aux),
        )?;
        self.wait_for(unit, |state| match state {
            Some("active") => Some(Ok(())),
            Some("failed") => Some(Err("failed to start".to_string())),
            _ => None,
        })
    }

    /// Gives unit `unit` `config`'s limits (at runtime, as runc's `Set`).
    pub fn set_properties(&self, unit: &str, config: &ResourceConfig) -> Result<(), SystemdError> {
        let properties = resource_properties(config);
        if properties.is_empty() {
            return Ok(());
        }
        self.call::<(), _>("SetUnitProperties", unit, &(unit, true, properties))
    }

    /// Stops `unit` and waits until systemd has let it go; a unit it does not know is stopped
    /// already.
    pub fn stop(&self, unit: &str) -> Result<(), SystemdError> {
        match self.call::<OwnedObjectPath, _>("StopUnit", unit, &(unit, "replace")) {
            Ok(_) => {}
            Err(SystemdError::Call { message, .. }) if message.contains(NO_SUCH_UNIT) => {
                return Ok(());
            }
            Err(e) => return Err(e),
        }
        let outcome = self.wait_for(unit, |state| match state {
            None | Some("inactive") => Some(Ok(())),
            Some("failed") => Some(Ok(())),
            _ => None,
        });
        // A failed unit stays loaded until reset; forget it as runc does.
        let _ = self.call::<(), _>("ResetFailedUnit", unit, &(unit,));
        outcome
    }

    /// The unit's `ActiveState`; `None` when systemd does not have it loaded.
    pub fn active_state(&self, unit: &str) -> Result<Option<String>, SystemdError> {
        let path = match self.call::<OwnedObjectPath, _>("GetUnit", unit, &(unit,)) {
            Ok(p) => p,
            Err(SystemdError::Call { message, .. }) if message.contains(NO_SUCH_UNIT) => {
                return Ok(None);
            }
            Err(e) => return Err(e),
        };
        let reply = self.runtime.block_on(self.connection.call_method(
            Some(DESTINATION),
            path.as_str(),
            Some("org.freedesktop.DBus.Properties"),
            "Get",
            &(UNIT, "ActiveState"),
        ));
        let call_error = |e: zbus::Error| SystemdError::Call {
            method: "Get ActiveState",
            unit: unit.to_string(),
            message: e.to_string(),
        };
        let value: zbus::zvariant::OwnedValue = reply
            .map_err(call_error)?
            .body()
            .deserialize()
            .map_err(call_error)?;
        Ok(String::try_from(value).ok())
    }

    fn wait_for(
        &self,
        unit: &str,
        done: impl Fn(Option<&str>) -> Option<Result<(), String>>,
    ) -> Result<(), SystemdError> {
        let deadline = Instant::now() + JOB_TIMEOUT;
        let mut delay = Duration::from_millis(2);
        loop {
            let state = self.active_state(unit)?;
            if let Some(outcome) = done(state.as_deref()) {
                return outcome.map_err(|message| SystemdError::Unit {
                    unit: unit.to_string(),
                    message,
                });
            }
            if Instant::now() >= deadline {
                return Err(SystemdError::Unit {
                    unit: unit.to_string(),
                    message: format!(
                        "still {} after {JOB_TIMEOUT:?}",
                        state.as_deref().unwrap_or("unloaded")
                    ),
                });
            }
            std::thread::sleep(delay);
            delay = (delay * 2).min(Duration::from_millis(100));
        }
    }

    fn call<R, B>(&self, method: &'static str, unit: &str, body: &B) -> Result<R, SystemdError>
    where
        R: for<'d> serde::Deserialize<'d> + zbus::zvariant::Type,
        B: serde::Serialize + zbus::zvariant::DynamicType,
    {
        let call_error = |e: zbus::Error| SystemdError::Call {
            method,
            unit: unit.to_string(),
            message: e.to_string(),
        };
        let reply = self
            .runtime
            .block_on(self.connection.call_method(
                Some(DESTINATION),
                MANAGER_PATH,
                Some(MANAGER),
                method,
                body,
            ))
            .map_err(call_error)?;
        reply.body().deserialize().map_err(call_error)
    }
}

/// `config`'s limits as systemd unit properties (runc's `genV2ResourcesProperties`); what
/// the config leaves unset is left out.
fn resource_properties(config: &ResourceConfig) -> Vec<(&'static str, Value<'static>)> {
    let mut properties = Vec::new();
    let limit = |v: i64| u64::try_from(v).unwrap_or(INFINITY);
    if let Some(memory) = config.memory.filter(|m| *m != 0) {
        properties.push(("MemoryMax", Value::from(limit(memory))));
    }
    if let Some(min) = config.memory_min.filter(|m| *m > 0) {
        properties.push(("MemoryMin", Value::from(limit(min))));
    }
    if let Some(weight) = config.cpu_shares.and_then(cpu_shares_to_weight) {
        properties.push(("CPUWeight", Value::from(weight)));
    }
    let period = config.cpu_period.filter(|p| *p != 0);
    if let Some(quota) = config.cpu_quota.filter(|q| *q != 0) {
        properties.push((
            "CPUQuotaPerSecUSec",
            Value::from(quota_per_second(quota, period.unwrap_or(100_000))),
        ));
    }
    if let Some(period) = period {
        properties.push(("CPUQuotaPeriodUSec", Value::from(period)));
    }
    if let Some(pids) = config.pids_limit.filter(|p| *p != 0) {
        properties.push(("TasksMax", Value::from(limit(pids))));
    }
    properties
}

/// CPU time per second for a CFS quota and period, rounded up to systemd's 10 ms steps as runc
/// rounds it (systemd would round it down to a smaller quota); a negative quota is none.
fn quota_per_second(quota: i64, period: u64) -> u64 {
    let Ok(quota) = u64::try_from(quota) else {
        return INFINITY;
    };
    let per_second = quota.saturating_mul(1_000_000) / period.max(1);
    per_second.div_ceil(10_000) * 10_000
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotas_round_up_to_ten_milliseconds_as_runc() {
        assert_eq!(quota_per_second(85_000, 100_000), 850_000);
        assert_eq!(quota_per_second(1_234, 100_000), 20_000);
        assert_eq!(quota_per_second(-1, 100_000), INFINITY);
    }

    #[test]
    fn unset_limits_are_left_out() {
        assert!(resource_properties(&ResourceConfig::default()).is_empty());
        let config = ResourceConfig {
            memory: Some(64 << 20),
            memory_min: Some(32 << 20),
            cpu_shares: Some(1024),
            cpu_quota: Some(-1),
            cpu_period: Some(100_000),
            pids_limit: Some(-1),
            ..Default::default()
        };
        let names: Vec<&str> = resource_properties(&config)
            .iter()
            .map(|(n, _)| *n)
            .collect();
        assert_eq!(
            names,
            [
                "MemoryMax",
                "MemoryMin",
                "CPUWeight",
                "CPUQuotaPerSecUSec",
                "CPUQuotaPeriodUSec",
                "TasksMax"
            ]
        );
    }
}
