//! The token manager against the in-memory test API server, on a clock the test moves.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use ferrolet_integration::apiserver::{ApiServerOptions, TestApiServer};
use serde_json::json;

use super::*;

const NS: &str = "ns";

/// A clock `offset` ahead of the real one.
#[derive(Clone, Default)]
struct TestClock(Arc<Mutex<Duration>>);

impl TestClock {
    fn advance_to(&self, offset: Duration) {
        *self.0.lock().unwrap() = offset;
    }

    fn clock(&self) -> Clock {
        let offset = self.0.clone();
        Arc::new(move || SystemTime::now() + *offset.lock().unwrap())
    }
}

struct Fixture {
    server: TestApiServer,
    manager: Arc<TokenManager>,
    clock: TestClock,
    /// UIDs of pods p1 and p2.
    uids: [String; 2],
}

async fn fixture() -> Fixture {
    let server = TestApiServer::start(ApiServerOptions::default())
        .await
        .unwrap();
    server
        .create("serviceaccounts", NS, json!({"metadata": {"name": "sa"}}))
        .await
        .unwrap();
    let mut uids = Vec::new();
    for name in ["p1", "p2"] {
        let p = server
            .create(
                "pods",
                NS,
                json!({"metadata": {"name": name}, "spec": {"serviceAccountName": "sa", "nodeName": "n1",
                    "containers": [{"name": "c", "image": "i"}]}}),
            )
            .await
            .unwrap();
        uids.push(p["metadata"]["uid"].as_str().unwrap().to_string());
    }
    let client = server
        .kube_client("system:node:n1", &["system:nodes"])
        .await
        .unwrap();
    let clock = TestClock::default();
    let manager = TokenManager::with_clock(ApiHandle::new(client, "n1"), clock.clock());
    Fixture {
        server,
        manager,
        clock,
        uids: [uids[0].clone(), uids[1].clone()],
    }
}

impl Fixture {
    fn spec(&self, pod: usize, expiration_seconds: i64) -> TokenRequestSpec {
        TokenRequestSpec {
            namespace: NS.into(),
            service_account: "sa".into(),
            audience: None,
            expiration_seconds,
            pod_name: format!("p{}", pod + 1),
            pod_uid: self.uids[pod].clone(),
        }
    }

    fn requests(&self) -> u64 {
        self.server
            .request_counts()
            .get("create")
            .copied()
            .unwrap_or(0)
    }
}

#[tokio::test]
async fn cached_then_refreshed_at_80_percent_of_the_lifetime() {
    let f = fixture().await;
    let spec = f.spec(0, 600);
    let first = f.manager.token(&spec).await.unwrap();
    let claims = f.server.verify_token(&first).unwrap();
    assert_eq!(claims["sub"], "system:serviceaccount:ns:sa");
    assert_eq!(
        claims["aud"],
        json!(["https://kubernetes.default.svc.cluster.local"])
    );
    assert_eq!(
        claims["kubernetes.io"]["pod"],
        json!({"name": "p1", "uid": f.uids[0]})
    );
    assert_eq!(
        claims["exp"].as_i64().unwrap() - claims["iat"].as_i64().unwrap(),
        600
    );
    assert_eq!(f.requests(), 1);
    // Up to 80% less the largest jitter (480 − 9 s): the cached token.
    f.clock.advance_to(Duration::from_secs(460));
    assert_eq!(f.manager.token(&spec).await.unwrap(), first);
    assert_eq!(f.requests(), 1);
    // Past 80%: a new one.
    f.clock.advance_to(Duration::from_secs(481));
    let second = f.manager.token(&spec).await.unwrap();
    assert_ne!(second, first);
    assert_eq!(f.requests(), 2);
    assert!(f.server.verify_token(&second).is_some());
    // The new one is cached by its own lifetime (back to the server's time: fresh).
    f.clock.advance_to(Duration::ZERO);
    assert_eq!(f.manager.token(&spec).await.unwrap(), second);
    assert_eq!(f.requests(), 2);
}

#[tokio::test]
async fn long_lived_tokens_are_refreshed_after_a_day() {
    let f = fixture().await;
    let spec = f.spec(0, 7 * 24 * 3600);
    let first = f.manager.token(&spec).await.unwrap();
    f.clock.advance_to(Duration::from_secs(24 * 3600 - 30));
    assert_eq!(f.manager.token(&spec).await.unwrap(), first);
    f.clock.advance_to(Duration::from_secs(24 * 3600 + 1));
    assert_ne!(f.manager.token(&spec).await.unwrap(), first);
    assert_eq!(f.requests(), 2);
}

#[tokio::test]
async fn each_request_spec_is_its_own_token() {
    let f = fixture().await;
    let default = f.spec(0, 600);
    let vault = TokenRequestSpec {
        audience: Some("vault".into()),
        ..f.spec(0, 600)
    };
    let longer = f.spec(0, 3600);
    let a = f.manager.token(&default).await.unwrap();
    let b = f.manager.token(&vault).await.unwrap();
    let c = f.manager.token(&longer).await.unwrap();
    assert_eq!(f.requests(), 3);
    assert_eq!(f.server.verify_token(&b).unwrap()["aud"], json!(["vault"]));
    for (spec, token) in [(&default, &a), (&vault, &b), (&longer, &c)] {
        assert_eq!(&f.manager.token(spec).await.unwrap(), token);
    }
    assert_eq!(f.requests(), 3);
}

#[tokio::test]
async fn forgetting_a_pod_drops_only_its_tokens() {
    let f = fixture().await;
    let (s1, s2) = (f.spec(0, 600), f.spec(1, 600));
    let t1 = f.manager.token(&s1).await.unwrap();
    let t2 = f.manager.token(&s2).await.unwrap();
    f.manager.forget_pod(&f.uids[0]);
    assert_eq!(f.manager.token(&s2).await.unwrap(), t2);
    assert_eq!(f.requests(), 2);
    assert_ne!(f.manager.token(&s1).await.unwrap(), t1);
    assert_eq!(f.requests(), 3);
}

#[tokio::test]
async fn a_failed_refresh_serves_the_cached_token_until_it_expires() {
    let f = fixture().await;
    let spec = f.spec(0, 600);
    let first = f.manager.token(&spec).await.unwrap();
    f.server.set_authorizer(|r| r.subresource != "token");
    f.clock.advance_to(Duration::from_secs(540));
    assert_eq!(f.manager.token(&spec).await.unwrap(), first);
    f.clock.advance_to(Duration::from_secs(601));
    let Err(ObjectError::Api(message)) = f.manager.token(&spec).await else {
        panic!("an expired token is not served");
    };
    assert!(message.contains("expired and refresh failed"), "{message}");
    assert!(message.contains("forbidden"), "{message}");
    // Expired tokens go in the periodic cleanup.
    assert_eq!(f.manager.cache().len(), 1);
    f.manager.drop_expired();
    assert_eq!(f.manager.cache().len(), 0);
}

#[tokio::test]
async fn a_first_failure_says_why() {
    let f = fixture().await;
    let spec = TokenRequestSpec {
        service_account: "nope".into(),
        ..f.spec(0, 600)
    };
    assert_eq!(
        f.manager.token(&spec).await,
        Err(ObjectError::Api(
            "failed to fetch token: serviceaccounts \"nope\" not found".into()
        ))
    );
    let gone = TokenRequestSpec {
        pod_uid: "recreated".into(),
        ..f.spec(0, 600)
    };
    let Err(ObjectError::Api(message)) = f.manager.token(&gone).await else {
        panic!("a stale pod UID is refused");
    };
    assert!(
        message.contains("does not match the UID in record"),
        "{message}"
    );
}
