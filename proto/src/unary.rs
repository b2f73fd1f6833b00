//! The plumbing of the hand-written gRPC services ([`crate::csi`], [`crate::pluginregistration`]):
//! a unary call from a client, and a unary method of a server as tonic wants it.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use tonic::transport::Channel;
use tonic::{Request, Response, Status};

/// A hand-written service's server type: `$server<T>` holding the implementation of `$trait`,
/// cloneable, named `$name` for tonic's router.
macro_rules! named_service {
    ($server:ident, $trait:ident, $name:expr, $doc:literal) => {
        #[doc = $doc]
        #[derive(Debug)]
        pub struct $server<T> {
            inner: std::sync::Arc<T>,
        }

        impl<T> Clone for $server<T> {
            fn clone(&self) -> Self {
                Self {
                    inner: self.inner.clone(),
                }
            }
        }

        impl<T: $trait> $server<T> {
            /// Serves `inner`.
            pub fn new(inner: T) -> Self {
                Self {
                    inner: std::sync::Arc::new(inner),
                }
            }
        }

        impl<T: $trait> tonic::server::NamedService for $server<T> {
            const NAME: &'static str = $name;
        }
    };
}
pub(crate) use named_service;

/// What a server method answers: a boxed future owning what it needs.
pub type Answer<A> = Pin<Box<dyn Future<Output = Result<A, Status>> + Send>>;

/// One unary call at `path` on `grpc`; `what` names the server in a not-ready error.
pub(crate) async fn call<Q, A>(
    grpc: &mut tonic::client::Grpc<Channel>,
    path: &'static str,
    request: Q,
    what: &str,
) -> Result<A, Status>
where
    Q: prost::Message + Send + Sync + 'static,
    A: prost::Message + Default + Send + Sync + 'static,
{
    grpc.ready()
        .await
        .map_err(|e| Status::unavailable(format!("{what} not ready: {e}")))?;
    let codec = tonic_prost::ProstCodec::<Q, A>::default();
    let path = http::uri::PathAndQuery::from_static(path);
    grpc.unary(Request::new(request), path, codec)
        .await
        .map(Response::into_inner)
}

/// One unary method of a service: the request decoded, `call` run, the answer encoded.
struct Method<T, Q, A> {
    inner: Arc<T>,
    call: fn(&T, Q) -> Answer<A>,
}

impl<T, Q, A> tonic::server::UnaryService<Q> for Method<T, Q, A>
where
    T: Send + Sync + 'static,
    A: Send + 'static,
{
    type Response = A;
    type Future = Answer<Response<A>>;

    fn call(&mut self, request: Request<Q>) -> Self::Future {
        let answer = (self.call)(&self.inner, request.into_inner());
        Box::pin(async move { answer.await.map(Response::new) })
    }
}

/// Serves `req` with the method `call` of `inner`.
pub(crate) async fn serve<T, Q, A>(
    inner: Arc<T>,
    call: fn(&T, Q) -> Answer<A>,
    req: http::Request<tonic::body::Body>,
) -> http::Response<tonic::body::Body>
where
    T: Send + Sync + 'static,
    Q: prost::Message + Default + Send + Sync + 'static,
    A: prost::Message + Send + Sync + 'static,
{
    let mut grpc = tonic::server::Grpc::new(tonic_prost::ProstCodec::<A, Q>::default());
    grpc.unary(Method { inner, call }, req).await
}
