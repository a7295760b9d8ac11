//! Serving the router: connections accepted on the node's listener, each
//! served with hyper's HTTP/1 on a task of the node's own ([`Tasks`], so
//! that a simulated host paused stops serving too), until `stop`. Then no
//! more are accepted, and each connection closes once the request it is
//! serving is answered.

use std::pin::pin;

use axum::Router;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::tasks::Tasks;

/// Serves `app` on `listener` until `stop` is cancelled.
pub(crate) async fn serve<L>(mut listener: L, app: Router, tasks: Tasks, stop: CancellationToken)
where
    L: axum::serve::Listener,
{
    loop {
        let (io, _) = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = stop.cancelled() => return,
        };
        let service = TowerToHyperService::new(app.clone());
        let stop = stop.clone();
        tasks.spawn(
            async move {
                let http = hyper::server::conn::http1::Builder::new();
                let mut connection = pin!(http.serve_connection(TokioIo::new(io), service));
                let served = tokio::select! {
                    served = connection.as_mut() => served,
                    _ = stop.cancelled() => {
                        connection.as_mut().graceful_shutdown();
                        connection.await
                    }
                };
                if let Err(e) = served {
                    tracing::debug!(%e, "connection ended");
                }
            }
            .in_current_span(),
        );
    }
}
