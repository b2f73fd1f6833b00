//! The event correlator of client-go's `tools/record` (events_cache.go), pure and with the
//! clock passed in: similar events are aggregated, repeats become patches of the event
//! already written, and a token bucket per (source, object) drops the spam.

use std::collections::HashSet;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

use super::lru::Lru;
use crate::events::EventType;

/// Go's `maxLruCacheEntries`: entries of each of the three caches.
pub const LRU_ENTRIES: usize = 4096;
/// Go's `defaultSpamBurst`: events a source may send about one object at once.
pub const SPAM_BURST: f64 = 25.0;
/// Go's `defaultSpamQPS`: the spam bucket's refill, one event per 5 minutes.
pub const SPAM_QPS: f64 = 1.0 / 300.0;
/// Go's `defaultAggregateMaxEvents`: distinct messages before aggregation.
pub const AGGREGATE_MAX_EVENTS: usize = 10;
/// Go's `defaultAggregateIntervalInSeconds`: how long similar events stay similar.
pub const AGGREGATE_INTERVAL_SECS: i64 = 600;

/// The prefix of an aggregated event's message (Go's `EventAggregatorByReasonMessageFunc`).
pub const COMBINED_PREFIX: &str = "(combined from similar events): ";

/// The correlator's limits; `Default` is Go's.
#[derive(Clone, Debug)]
pub struct CorrelatorConfig {
    /// Entries per cache.
    pub lru_entries: usize,
    /// Token bucket size per (source, object).
    pub spam_burst: f64,
    /// Tokens per second added back.
    pub spam_qps: f64,
    /// Distinct messages of similar events before they are combined.
    pub aggregate_max_events: usize,
    /// Seconds after the last similar event at which the count starts again.
    pub aggregate_interval_secs: i64,
}

impl Default for CorrelatorConfig {
    fn default() -> Self {
        Self {
            lru_entries: LRU_ENTRIES,
            spam_burst: SPAM_BURST,
            spam_qps: SPAM_QPS,
            aggregate_max_events: AGGREGATE_MAX_EVENTS,
            aggregate_interval_secs: AGGREGATE_INTERVAL_SECS,
        }
    }
}

/// What to do with one recorded event.
#[derive(Clone, Debug, PartialEq)]
pub enum Decision {
    /// Over the spam limit: not written.
    Drop,
    /// A new event to create.
    Create(Event),
    /// A repeat: patch the existing event `name` (in `event`'s namespace); `event` is the
    /// whole updated event, to create if the old one is gone.
    Patch {
        /// The existing event's name.
        name: String,
        /// The new count.
        count: i32,
        /// The time of this occurrence.
        last_timestamp: Time,
        /// This occurrence's message.
        message: String,
        /// The event as it should now be.
        event: Event,
    },
}

/// The body of a repeat's strategic merge patch: what Go's two-way merge patch carries.
pub fn patch_body(count: i32, last_timestamp: &Time, message: &str) -> serde_json::Value {
    let mut body = serde_json::json!({ "count": count, "lastTimestamp": last_timestamp });
    if !message.is_empty() {
        body["message"] = message.into();
    }
    body
}

/// The event the recorder writes for `object`, as Go's `recorderImpl.makeEvent` plus the
/// source and reporting fields; a cluster-scoped object's event goes to "default".
pub fn make_event(
    source: &EventSource,
    object: &ObjectReference,
    kind: EventType,
    reason: &str,
    message: &str,
    now: Timestamp,
) -> Event {
    let namespace = match object.namespace.as_deref() {
        Some(ns) if !ns.is_empty() => ns.to_owned(),
        _ => "default".to_owned(),
    };
    let name = event_name(object.name.as_deref().unwrap_or(""), now);
    Event {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: Some(namespace),
            ..Default::default()
        },
        involved_object: object.clone(),
        reason: Some(reason.to_owned()),
        message: Some(message.to_owned()),
        first_timestamp: Some(Time(now)),
        last_timestamp: Some(Time(now)),
        count: Some(1),
        type_: Some(kind.as_str().to_owned()),
        source: Some(source.clone()),
        reporting_component: source.component.clone(),
        reporting_instance: source.host.clone(),
        ..Default::default()
    }
}

/// `<object>.<hex unix nanos>`, Go's `fmt.Sprintf("%v.%x", ref.Name, t.UnixNano())`.
pub fn event_name(object_name: &str, now: Timestamp) -> String {
    format!("{object_name}.{:x}", now.as_nanosecond())
}

/// Correlates events in order; one per recorder (its caches are its memory).
#[derive(Debug)]
pub struct EventCorrelator {
    config: CorrelatorConfig,
    spam: Lru<String, TokenBucket>,
    aggregate: Lru<String, AggregateRecord>,
    log: Lru<String, EventLog>,
}

impl Default for EventCorrelator {
    fn default() -> Self {
        Self::new(CorrelatorConfig::default())
    }
}

impl EventCorrelator {
    /// A correlator with empty caches.
    pub fn new(config: CorrelatorConfig) -> Self {
        Self {
            spam: Lru::new(config.lru_entries),
            aggregate: Lru::new(config.lru_entries),
            log: Lru::new(config.lru_entries),
            config,
        }
    }

    /// What to do with `event`, recorded at `now` (Go's `EventCorrelate`: aggregate, then
    /// observe, then the spam filter on what would be written).
    pub fn correlate(&mut self, event: Event, now: Timestamp) -> Decision {
        let (event, key) = self.aggregate(event, now);
        let (event, repeat) = self.observe(event, key);
        if !self.allow(&event, now) {
            return Decision::Drop;
        }
        if !repeat {
            return Decision::Create(event);
        }
        Decision::Patch {
            name: event.metadata.name.clone().unwrap_or_default(),
            count: event.count.unwrap_or(1),
            last_timestamp: event.last_timestamp.clone().unwrap_or(Time(now)),
            message: event.message.clone().unwrap_or_default(),
            event,
        }
    }

    /// Remembers the server's copy of a written event (its name and resource version), as
    /// Go's `UpdateState`.
    pub fn update_state(&mut self, event: &Event) {
        self.log.insert(event_key(event), EventLog::of(event));
    }

    fn aggregate(&mut self, event: Event, now: Timestamp) -> (Event, String) {
        let key = event_key(&event);
        let aggregate_key = aggregate_key(&event);
        let message = event.message.clone().unwrap_or_default();
        let interval = i128::from(self.config.aggregate_interval_secs) * 1_000_000_000;
        let mut record = match self.aggregate.get_mut(&aggregate_key) {
            Some(r) if now.as_nanosecond() - r.last.as_nanosecond() <= interval => r.clone(),
            _ => AggregateRecord::default(),
        };
        record.messages.insert(message.clone());
        record.last = now;
        let similar = record.messages.len();
        if similar >= self.config.aggregate_max_events {
            // Go keeps the set from growing past the limit by dropping any one member.
            if let Some(any) = record.messages.iter().next().cloned() {
                record.messages.remove(&any);
            }
        }
        self.aggregate.insert(aggregate_key.clone(), record);
        if similar < self.config.aggregate_max_events {
            return (event, key);
        }
        let object_name = event.involved_object.name.as_deref().unwrap_or("");
        let combined = Event {
            metadata: ObjectMeta {
                name: Some(event_name(object_name, now)),
                namespace: event.metadata.namespace.clone(),
                ..Default::default()
            },
            count: Some(1),
            first_timestamp: Some(Time(now)),
            last_timestamp: Some(Time(now)),
            message: Some(format!("{COMBINED_PREFIX}{message}")),
            involved_object: event.involved_object,
            type_: event.type_,
            reason: event.reason,
            source: event.source,
            reporting_component: event.reporting_component,
            reporting_instance: event.reporting_instance,
            ..Default::default()
        };
        (combined, aggregate_key)
    }

    /// Go's `eventObserve`: a repeat takes the first occurrence's name, resource version
    /// and first timestamp, and the next count.
    fn observe(&mut self, mut event: Event, key: String) -> (Event, bool) {
        let repeat = match self.log.get_mut(&key) {
            Some(last) if last.count > 0 => {
                event.metadata.name = last.name.clone();
                event.metadata.resource_version = last.resource_version.clone();
                event.first_timestamp = last.first_timestamp.clone();
                event.count = Some(last.count.saturating_add(1));
                true
            }
            _ => false,
        };
        self.log.insert(key, EventLog::of(&event));
        (event, repeat)
    }

    /// The spam filter: one token per event from a full bucket per (source, object).
    fn allow(&mut self, event: &Event, now: Timestamp) -> bool {
        let key = spam_key(event);
        let (burst, qps) = (self.config.spam_burst, self.config.spam_qps);
        if self.spam.get_mut(&key).is_none() {
            self.spam.insert(key.clone(), TokenBucket::full(burst, now));
        }
        self.spam
            .get_mut(&key)
            .is_some_and(|bucket| bucket.try_take(burst, qps, now))
    }
}

/// A token bucket as `golang.org/x/time/rate`: starts full, refills continuously.
#[derive(Clone, Debug)]
struct TokenBucket {
    tokens: f64,
    at: Timestamp,
}

impl TokenBucket {
    fn full(burst: f64, now: Timestamp) -> Self {
        Self {
            tokens: burst,
            at: now,
        }
    }

    fn try_take(&mut self, burst: f64, qps: f64, now: Timestamp) -> bool {
        let elapsed_ns = (now.as_nanosecond() - self.at.as_nanosecond()).max(0);
        // Nanoseconds as f64 lose precision only past ~104 days, where the bucket is full.
        let refilled = self.tokens + elapsed_ns as f64 / 1e9 * qps;
        self.tokens = refilled.min(burst);
        self.at = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// Distinct messages of similar events seen lately.
#[derive(Clone, Debug)]
struct AggregateRecord {
    messages: HashSet<String>,
    last: Timestamp,
}

impl Default for AggregateRecord {
    fn default() -> Self {
        Self {
            messages: HashSet::new(),
            last: Timestamp::UNIX_EPOCH,
        }
    }
}

/// What is known of an event already written.
#[derive(Clone, Debug)]
struct EventLog {
    count: i32,
    first_timestamp: Option<Time>,
    name: Option<String>,
    resource_version: Option<String>,
}

impl EventLog {
    fn of(event: &Event) -> Self {
        Self {
            count: event.count.unwrap_or(1),
            first_timestamp: event.first_timestamp.clone(),
            name: event.metadata.name.clone(),
            resource_version: event.metadata.resource_version.clone(),
        }
    }
}

fn join(parts: &[&str]) -> String {
    // A separator Go does not use, so that "ab"+"c" and "a"+"bc" stay apart.
    parts.join("\u{1f}")
}

fn source_parts(event: &Event) -> (&str, &str) {
    let source = event.source.as_ref();
    (
        source.and_then(|s| s.component.as_deref()).unwrap_or(""),
        source.and_then(|s| s.host.as_deref()).unwrap_or(""),
    )
}

fn s(v: &Option<String>) -> &str {
    v.as_deref().unwrap_or("")
}

/// Go's `getEventKey`: source, object (with field path), type, reason, message.
fn event_key(event: &Event) -> String {
    let (component, host) = source_parts(event);
    let o = &event.involved_object;
    join(&[
        component,
        host,
        s(&o.kind),
        s(&o.namespace),
        s(&o.name),
        s(&o.field_path),
        s(&o.uid),
        s(&o.api_version),
        s(&event.type_),
        s(&event.reason),
        s(&event.message),
    ])
}

/// Go's `EventAggregatorByReasonFunc`: source, object (without field path), type, reason,
/// reporting controller and instance.
fn aggregate_key(event: &Event) -> String {
    let (component, host) = source_parts(event);
    let o = &event.involved_object;
    join(&[
        component,
        host,
        s(&o.kind),
        s(&o.namespace),
        s(&o.name),
        s(&o.uid),
        s(&o.api_version),
        s(&event.type_),
        s(&event.reason),
        s(&event.reporting_component),
        s(&event.reporting_instance),
    ])
}

/// Go's `getSpamKey`: source and object (without field path).
fn spam_key(event: &Event) -> String {
    let (component, host) = source_parts(event);
    let o = &event.involved_object;
    join(&[
        component,
        host,
        s(&o.kind),
        s(&o.namespace),
        s(&o.name),
        s(&o.uid),
        s(&o.api_version),
    ])
}
