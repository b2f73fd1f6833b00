//! Which devices a container gets, as Go's `devicesToAllocate` with the `none` topology
//! policy: its pod's init containers' devices first, then free healthy ones, the plugin's
//! preference (when it offers `GetPreferredAllocation`) before the rest. Pure: the manager
//! holds the state and makes the calls. Sets are ordered, so without a preference the lowest
//! ids go first and a choice is repeatable.

use std::collections::BTreeSet;

use ferrolet_proto::deviceplugin::{
    ContainerPreferredAllocationRequest, PreferredAllocationRequest, PreferredAllocationResponse,
};

/// The first step of a choice.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Choice {
    /// Reused devices cover the request.
    Done(BTreeSet<String>),
    /// More are needed from `available`; the plugin may be asked which.
    Ask {
        /// Reused devices already taken.
        taken: BTreeSet<String>,
        /// Free healthy devices, at least as many as still needed.
        available: BTreeSet<String>,
        /// The container's whole request.
        required: usize,
    },
}

/// Starts choosing `needed` devices from `reusable` and then `healthy` minus `in_use`; when
/// too few are free, `(still needed, free)` for Go's "requested number of devices
/// unavailable" message.
pub fn choose(
    needed: usize,
    reusable: &BTreeSet<String>,
    healthy: &BTreeSet<String>,
    in_use: &BTreeSet<String>,
) -> Result<Choice, (usize, usize)> {
    let taken: BTreeSet<String> = reusable.iter().take(needed).cloned().collect();
    if taken.len() == needed {
        return Ok(Choice::Done(taken));
    }
    let remaining = needed - taken.len();
    let available: BTreeSet<String> = healthy
        .iter()
        .filter(|id| !in_use.contains(*id) && !taken.contains(*id))
        .cloned()
        .collect();
    if available.len() < remaining {
        return Err((remaining, available.len()));
    }
    Ok(Choice::Ask {
        taken,
        available,
        required: needed,
    })
}

/// `GetPreferredAllocation`'s request: what may be chosen (free and already taken), what must
/// be in it (taken), and how many.
pub fn preferred_request(
    available: &BTreeSet<String>,
    taken: &BTreeSet<String>,
    required: usize,
) -> PreferredAllocationRequest {
    PreferredAllocationRequest {
        container_requests: vec![ContainerPreferredAllocationRequest {
            available_device_ids: available.union(taken).cloned().collect(),
            must_include_device_ids: taken.iter().cloned().collect(),
            allocation_size: i32::try_from(required).unwrap_or(i32::MAX),
        }],
    }
}

/// The devices a plugin prefers; nothing unless it answered for exactly one container, as Go.
pub fn preferred_ids(answer: PreferredAllocationResponse) -> BTreeSet<String> {
    match <[_; 1]>::try_from(answer.container_responses) {
        Ok([one]) => one.device_ids.into_iter().collect(),
        Err(_) => BTreeSet::new(),
    }
}

/// Completes `taken` to `required` devices: preferred ones that are free first, then the
/// other free ones; `Err(count reached)` if it cannot.
pub fn fill(
    mut taken: BTreeSet<String>,
    preferred: &BTreeSet<String>,
    available: &BTreeSet<String>,
    required: usize,
) -> Result<BTreeSet<String>, usize> {
    let candidates = preferred
        .iter()
        .filter(|id| available.contains(*id))
        .chain(available.iter());
    for id in candidates {
        if taken.len() >= required {
            break;
        }
        taken.insert(id.clone());
    }
    if taken.len() == required {
        Ok(taken)
    } else {
        Err(taken.len())
    }
}

#[cfg(test)]
mod tests {
    use ferrolet_proto::deviceplugin::ContainerPreferredAllocationResponse;

    use super::*;

    fn set(ids: &[&str]) -> BTreeSet<String> {
        ids.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn reused_devices_come_first_and_may_cover_the_request() {
        let c = choose(1, &set(&["b"]), &set(&["a", "b"]), &set(&["b"])).unwrap();
        assert_eq!(c, Choice::Done(set(&["b"])));
        let c = choose(2, &set(&["b"]), &set(&["a", "b", "c"]), &set(&["b"])).unwrap();
        let Choice::Ask {
            taken, available, ..
        } = c
        else {
            panic!("{c:?}")
        };
        assert_eq!((taken, available.clone()), (set(&["b"]), set(&["a", "c"])));
        assert_eq!(
            fill(set(&["b"]), &BTreeSet::new(), &available, 2).unwrap(),
            set(&["a", "b"])
        );
    }

    #[test]
    fn too_few_free_devices_say_how_many() {
        assert_eq!(
            choose(
                3,
                &BTreeSet::new(),
                &set(&["a", "b", "c"]),
                &set(&["a", "b"])
            ),
            Err((3, 1))
        );
    }

    #[test]
    fn the_plugins_preference_wins_where_free() {
        let available = set(&["a", "b", "c", "d"]);
        let preferred = preferred_ids(PreferredAllocationResponse {
            container_responses: vec![ContainerPreferredAllocationResponse {
                device_ids: vec!["d".into(), "zz".into()],
            }],
        });
        assert_eq!(
            fill(BTreeSet::new(), &preferred, &available, 2).unwrap(),
            set(&["a", "d"])
        );
        let request = preferred_request(&available, &set(&["x"]), 3);
        let r = &request.container_requests[0];
        assert_eq!(r.must_include_device_ids, ["x"]);
        assert_eq!(r.available_device_ids.len(), 5);
        assert_eq!(r.allocation_size, 3);
        assert!(preferred_ids(PreferredAllocationResponse::default()).is_empty());
    }
}
