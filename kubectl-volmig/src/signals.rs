//! The signals that end a client's part in an operation (the operation goes on).

/// Resolves on Ctrl-C, SIGTERM (`timeout`, a stopping container) or SIGHUP
/// (a closed terminal): each leaves an operation running in the cluster.
#[cfg(unix)]
pub async fn interrupted() {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut hup)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::hangup()),
    ) else {
        let _ = tokio::signal::ctrl_c().await;
        return;
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
        _ = hup.recv() => {}
    }
}

/// Resolves on Ctrl-C (or Ctrl-Break, a closed console: tokio maps them).
#[cfg(not(unix))]
pub async fn interrupted() {
    let _ = tokio::signal::ctrl_c().await;
}
