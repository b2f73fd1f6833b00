//! What a volume's set-up reads from the API, fetched before the blocking set-up through the
//! kubelet's seams ([`ObjectSource`], [`TokenSource`]): the secrets, configMaps and tokens it
//! refers to, all at once. A read that fails is kept as that reference's error, for the
//! set-up to report in Go's words.

use std::collections::BTreeMap;
use std::hash::{DefaultHasher, Hash, Hasher};

use futures::future::join_all;

use crate::objects::{ObjectSource, TokenRequestSpec, TokenSource};
use crate::volume::{VolumeInputs, VolumeReferences};

/// Reads everything `references` names in `namespace`.
pub async fn fetch_inputs(
    objects: &dyn ObjectSource,
    tokens: &dyn TokenSource,
    namespace: &str,
    references: &VolumeReferences,
) -> VolumeInputs {
    let secrets = join_all(
        references
            .secrets
            .iter()
            .map(|name| async move { (name.clone(), objects.secret(namespace, name).await) }),
    );
    let config_maps = join_all(
        references
            .config_maps
            .iter()
            .map(|name| async move { (name.clone(), objects.config_map(namespace, name).await) }),
    );
    let token_reads = join_all(
        references
            .tokens
            .iter()
            .map(|spec| async move { (spec.clone(), tokens.token(spec).await) }),
    );
    let (secrets, config_maps, token_reads) =
        futures::future::join3(secrets, config_maps, token_reads).await;
    let mut inputs = VolumeInputs::default();
    for (name, read) in secrets {
        inputs.set_secret(&name, read);
    }
    for (name, read) in config_maps {
        inputs.set_config_map(&name, read);
    }
    for (spec, read) in token_reads {
        inputs.set_token(&spec, read);
    }
    inputs
}

/// A fingerprint of the tokens read (a renewed token changes it); `None` without tokens.
pub fn token_fingerprint(tokens: &BTreeMap<TokenRequestSpec, String>) -> Option<u64> {
    if tokens.is_empty() {
        return None;
    }
    let mut h = DefaultHasher::new();
    tokens.hash(&mut h);
    Some(h.finish())
}
