//! Tasks that end with their owner: dropping the handle aborts the task, so
//! dropping a sandbox stops every loop and pod worker it started (and with
//! them, every container process) even while the runtime goes on.

use tokio::task::JoinHandle;

pub struct Owned(JoinHandle<()>);

impl Owned {
    pub fn spawn(future: impl std::future::Future<Output = ()> + Send + 'static) -> Owned {
        Owned(tokio::spawn(future))
    }

    pub fn is_finished(&self) -> bool {
        self.0.is_finished()
    }

    /// Waits for the task to end on its own.
    pub async fn join(mut self) {
        let _ = (&mut self.0).await;
    }
}

impl Drop for Owned {
    fn drop(&mut self) {
        self.0.abort();
    }
}
