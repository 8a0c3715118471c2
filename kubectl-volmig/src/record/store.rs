//! Reading, listing and writing records in the cluster.
//!
//! Every write of an existing record is a compare-and-swap on the
//! ConfigMap's `resourceVersion`: [`RecordStore::update`] reads, applies a
//! change, writes, and on a conflict reads again and re-applies the change,
//! so a driver and an `abort` from another machine never lose each other's
//! changes.

use std::marker::PhantomData;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::Client;

use super::configmap::RecordError;
use super::group::{GroupView, MigrationGroup};
use super::rehome::Rehome;
use super::{Metadata, VolumeMigration};
use crate::names;

/// What a store keeps in ConfigMaps: a claim's record, or the head of a
/// set of claims.
pub trait Stored: Clone + PartialEq + Sized {
    fn to_config_map(&self) -> Result<ConfigMap, RecordError>;
    fn from_config_map(cm: &ConfigMap) -> Result<Self, RecordError>;
    fn metadata(&self) -> &Metadata;
    fn metadata_mut(&mut self) -> &mut Metadata;
    /// The label selector that lists them.
    fn selector() -> String;
}

impl Stored for VolumeMigration {
    fn to_config_map(&self) -> Result<ConfigMap, RecordError> {
        super::configmap::to_config_map(self)
    }
    fn from_config_map(cm: &ConfigMap) -> Result<Self, RecordError> {
        super::configmap::from_config_map(cm)
    }
    fn metadata(&self) -> &Metadata {
        &self.metadata
    }
    fn metadata_mut(&mut self) -> &mut Metadata {
        &mut self.metadata
    }
    fn selector() -> String {
        names::record_selector()
    }
}

impl Stored for MigrationGroup {
    fn to_config_map(&self) -> Result<ConfigMap, RecordError> {
        super::group::to_config_map(self)
    }
    fn from_config_map(cm: &ConfigMap) -> Result<Self, RecordError> {
        super::group::from_config_map(cm)
    }
    fn metadata(&self) -> &Metadata {
        &self.metadata
    }
    fn metadata_mut(&mut self) -> &mut Metadata {
        &mut self.metadata
    }
    fn selector() -> String {
        names::group_selector()
    }
}

impl Stored for Rehome {
    fn to_config_map(&self) -> Result<ConfigMap, RecordError> {
        super::rehome::to_config_map(self)
    }
    fn from_config_map(cm: &ConfigMap) -> Result<Self, RecordError> {
        super::rehome::from_config_map(cm)
    }
    fn metadata(&self) -> &Metadata {
        &self.metadata
    }
    fn metadata_mut(&mut self) -> &mut Metadata {
        &mut self.metadata
    }
    fn selector() -> String {
        names::component_selector(names::Component::Rehome)
    }
}

/// How many times [`RecordStore::update`] re-reads after a conflict before
/// giving up.
pub const MAX_CONFLICTS: u32 = 10;

/// Why reading or writing a record failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// No record of that name.
    #[error(
        "no operation \"{op}\" in namespace \"{namespace}\"; \
         list them with: kubectl volmig status -n {namespace}"
    )]
    NotFound { op: String, namespace: String },
    /// [`RecordStore::create`] of an operation id already taken.
    #[error("operation \"{op}\" already exists in namespace \"{namespace}\"")]
    AlreadyExists { op: String, namespace: String },
    /// Other writers changed the record every time, [`MAX_CONFLICTS`] times
    /// in a row.
    #[error(
        "operation \"{op}\" in namespace \"{namespace}\" changed under every one of \
         {attempts} writes; try again"
    )]
    Conflict {
        op: String,
        namespace: String,
        attempts: u32,
    },
    /// An [`RecordStore::update`] change declined to apply to the record as
    /// found (someone else aborted it, it already finished, ...); nothing was
    /// written.
    #[error("{0}")]
    Changed(String),
    /// The record could not be encoded or decoded.
    #[error(transparent)]
    Record(#[from] RecordError),
    /// The API server refused or could not be reached.
    #[error("{doing}: {source}")]
    Kube {
        /// What failed, in words: `reading operation "x" in namespace "y"`.
        doing: String,
        #[source]
        source: Box<kube::Error>,
    },
}

impl StoreError {
    /// Worth trying again later: transport failures, server errors (5xx),
    /// throttling (429) and conflicts that outlasted the retries. Not:
    /// missing, forbidden or invalid records, or a change that declined.
    pub fn is_retryable(&self) -> bool {
        match self {
            StoreError::Conflict { .. } => true,
            StoreError::Kube { source, .. } => kube_retryable(source),
            StoreError::NotFound { .. }
            | StoreError::AlreadyExists { .. }
            | StoreError::Changed(_)
            | StoreError::Record(_) => false,
        }
    }
}

/// Whether a kube error may go away by itself.
fn kube_retryable(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(status) => status.code >= 500 || status.code == 429,
        kube::Error::HyperError(_) | kube::Error::Service(_) | kube::Error::ReadEvents(_) => true,
        _ => false,
    }
}

/// The records of one namespace, of kind `T`.
pub struct Store<T> {
    api: Api<ConfigMap>,
    namespace: String,
    kind: PhantomData<fn() -> T>,
}

impl<T> Clone for Store<T> {
    fn clone(&self) -> Self {
        Store {
            api: self.api.clone(),
            namespace: self.namespace.clone(),
            kind: PhantomData,
        }
    }
}

/// Claims' records (one-claim operations, and each claim of a set).
pub type RecordStore = Store<VolumeMigration>;
/// Heads of sets of claims.
pub type GroupStore = Store<MigrationGroup>;

impl<T: Stored> Store<T> {
    /// The records in `namespace` (operations whose destination is there).
    pub fn new(client: Client, namespace: &str) -> Self {
        Store {
            api: Api::namespaced(client, namespace),
            namespace: namespace.to_string(),
            kind: PhantomData,
        }
    }

    /// The namespace this store reads and writes.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// Stores a new record (`vm`'s `resourceVersion` is ignored) and returns
    /// it as stored, with its creation time and `resourceVersion`.
    pub async fn create(&self, vm: &T) -> Result<T, StoreError> {
        let op = &vm.metadata().name;
        let mut cm = vm.to_config_map()?;
        cm.metadata.namespace = Some(self.namespace.clone());
        cm.metadata.resource_version = None;
        cm.metadata.creation_timestamp = None;
        match self.api.create(&PostParams::default(), &cm).await {
            Ok(cm) => Ok(T::from_config_map(&cm)?),
            Err(kube::Error::Api(s)) if s.is_already_exists() => Err(StoreError::AlreadyExists {
                op: op.clone(),
                namespace: self.namespace.clone(),
            }),
            Err(e) => Err(self.kube_error("creating", op, e)),
        }
    }

    /// The record of operation `op`.
    pub async fn get(&self, op: &str) -> Result<T, StoreError> {
        match self.api.get(&names::record_name(op)).await {
            Ok(cm) => Ok(T::from_config_map(&cm)?),
            Err(e) => Err(self.kube_error("reading", op, e)),
        }
    }

    /// Every record in the namespace, oldest first (then by name). A
    /// ConfigMap that carries a record's labels but does not decode is
    /// skipped with a warning.
    pub async fn list(&self) -> Result<Vec<T>, StoreError> {
        list_records(&self.api)
            .await
            .map_err(|source| StoreError::Kube {
                doing: format!("listing operations in namespace {:?}", self.namespace),
                source: Box::new(source),
            })
    }

    /// Every record in every namespace, by namespace, then oldest first.
    pub async fn list_all(client: Client) -> Result<Vec<T>, StoreError> {
        let mut records =
            list_records(&Api::all(client))
                .await
                .map_err(|source| StoreError::Kube {
                    doing: "listing operations in all namespaces".to_string(),
                    source: Box::new(source),
                })?;
        records.sort_by(|a: &T, b: &T| a.metadata().namespace.cmp(&b.metadata().namespace));
        Ok(records)
    }

    /// Reads the record of `op`, applies `change` and writes it back if it
    /// changed, with the `resourceVersion` read. When another writer got
    /// there first (409 Conflict), the record is read again after a short,
    /// growing, jittered pause and `change` applied again to the fresh copy,
    /// up to [`MAX_CONFLICTS`] reads in all: so `change` must be a function
    /// of the record it is given, not of an earlier copy. It may return an
    /// error (typically [`StoreError::Changed`]) to stop without writing.
    /// Changes to the metadata are ignored. Returns the record as stored.
    pub async fn update<F>(&self, op: &str, mut change: F) -> Result<T, StoreError>
    where
        F: FnMut(&mut T) -> Result<(), StoreError>,
    {
        let name = names::record_name(op);
        for conflicts in 0..MAX_CONFLICTS {
            if conflicts > 0 {
                tokio::time::sleep(conflict_backoff(conflicts)).await;
            }
            let current = self.get(op).await?;
            let mut next = current.clone();
            change(&mut next)?;
            *next.metadata_mut() = current.metadata().clone();
            if next == current {
                return Ok(current);
            }
            let cm = next.to_config_map()?;
            match self.api.replace(&name, &PostParams::default(), &cm).await {
                Ok(cm) => return Ok(T::from_config_map(&cm)?),
                Err(kube::Error::Api(s)) if s.is_conflict() => {
                    tracing::debug!(op, "record changed while updating it; reading it again");
                }
                Err(e) => return Err(self.kube_error("updating", op, e)),
            }
        }
        Err(StoreError::Conflict {
            op: op.to_string(),
            namespace: self.namespace.clone(),
            attempts: MAX_CONFLICTS,
        })
    }

    /// Deletes the record of `op` (not the operation's other objects).
    pub async fn delete(&self, op: &str) -> Result<(), StoreError> {
        match self
            .api
            .delete(&names::record_name(op), &DeleteParams::default())
            .await
        {
            Ok(_) => Ok(()),
            Err(e) => Err(self.kube_error("deleting", op, e)),
        }
    }

    /// `e` from `action` on `op`'s record as a [`StoreError`], 404 as
    /// [`StoreError::NotFound`].
    fn kube_error(&self, action: &str, op: &str, e: kube::Error) -> StoreError {
        match e {
            kube::Error::Api(s) if s.is_not_found() => StoreError::NotFound {
                op: op.to_string(),
                namespace: self.namespace.clone(),
            },
            source => StoreError::Kube {
                doing: format!(
                    "{action} operation {op:?} in namespace {:?}",
                    self.namespace
                ),
                source: Box::new(source),
            },
        }
    }
}

/// An operation as stored under its name: one claim's record, or a set's
/// head.
pub enum AnyRecord {
    One(Box<VolumeMigration>),
    Set(Box<MigrationGroup>),
    Rehome(Box<Rehome>),
}

/// Operation `op` of `namespace`, whichever it is: one read, decoded as
/// its labels say.
pub async fn get_any(client: &Client, namespace: &str, op: &str) -> Result<AnyRecord, StoreError> {
    let store = RecordStore::new(client.clone(), namespace);
    let cm = match store.api.get(&names::record_name(op)).await {
        Ok(cm) => cm,
        Err(e) => return Err(store.kube_error("reading", op, e)),
    };
    let component = cm
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(names::COMPONENT_KEY));
    if component.map(String::as_str) == Some(names::Component::Rehome.as_str()) {
        return Ok(AnyRecord::Rehome(Box::new(Rehome::from_config_map(&cm)?)));
    }
    if component.map(String::as_str) == Some(names::Component::Operation.as_str()) {
        return Ok(AnyRecord::Set(Box::new(MigrationGroup::from_config_map(
            &cm,
        )?)));
    }
    Ok(AnyRecord::One(Box::new(VolumeMigration::from_config_map(
        &cm,
    )?)))
}

/// A set's head with its claims' records, read with one list per
/// namespace the claims' records live in.
pub async fn group_view(client: &Client, group: MigrationGroup) -> Result<GroupView, StoreError> {
    let mut found: Vec<VolumeMigration> = Vec::new();
    let mut namespaces: Vec<&str> = group.spec.claims.iter().map(|m| m.namespace()).collect();
    namespaces.sort_unstable();
    namespaces.dedup();
    for ns in namespaces {
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
        let selector = names::members_selector(&group.metadata.name);
        let listed = list_selected(&api, &selector)
            .await
            .map_err(|source| StoreError::Kube {
                doing: format!(
                    "reading the claims of operation {:?} in namespace {ns:?}",
                    group.metadata.name
                ),
                source: Box::new(source),
            })?;
        found.extend(listed);
    }
    let members = group
        .spec
        .claims
        .iter()
        .map(|m| {
            found
                .iter()
                .find(|vm| {
                    vm.metadata.name == m.operation && vm.metadata.namespace == m.namespace()
                })
                .cloned()
        })
        .collect();
    Ok(GroupView { group, members })
}

/// The pause before the `n`th re-read after a conflict: 5 ms doubling up to
/// 1 s, half of it random, so that writers fall out of step and a writer
/// that keeps losing waits out a burst of the other's writes.
fn conflict_backoff(n: u32) -> Duration {
    let cap = (5u64 << n.min(8)).min(1000);
    let jitter = u64::from(getrandom::u32().unwrap_or(0)) % (cap / 2 + 1);
    Duration::from_millis(cap / 2 + jitter)
}

/// The records `api` lists, oldest first, then by name.
async fn list_records<T: Stored>(api: &Api<ConfigMap>) -> Result<Vec<T>, kube::Error> {
    list_selected(api, &T::selector()).await
}

/// The records `api` lists with `selector`, oldest first, then by name.
async fn list_selected<T: Stored>(
    api: &Api<ConfigMap>,
    selector: &str,
) -> Result<Vec<T>, kube::Error> {
    let list = api.list(&ListParams::default().labels(selector)).await?;
    let mut records: Vec<T> = list
        .items
        .iter()
        .filter_map(|cm| match T::from_config_map(cm) {
            Ok(vm) => Some(vm),
            Err(e) => {
                tracing::warn!("skipping {e}");
                None
            }
        })
        .collect();
    sort_records(&mut records);
    Ok(records)
}

/// Oldest first, then by name; records without a creation time last.
fn sort_records<T: Stored>(records: &mut [T]) {
    records.sort_by(|a, b| {
        let created = |vm: &T| {
            (
                vm.metadata().creation_timestamp.is_none(),
                vm.metadata().creation_timestamp,
            )
        };
        created(a)
            .cmp(&created(b))
            .then_with(|| a.metadata().name.cmp(&b.metadata().name))
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{Metadata, MigrationStatus};
    use kube::core::Status;

    fn api_error(code: u16, reason: &str) -> kube::Error {
        kube::Error::Api(Status::failure("nope", reason).with_code(code).boxed())
    }

    fn kube(source: kube::Error) -> StoreError {
        StoreError::Kube {
            doing: "reading operation \"x\" in namespace \"y\"".into(),
            source: Box::new(source),
        }
    }

    #[test]
    fn server_trouble_is_retryable_refusals_are_not() {
        for (code, reason) in [
            (500, "InternalError"),
            (503, "ServiceUnavailable"),
            (429, "TooManyRequests"),
        ] {
            assert!(kube(api_error(code, reason)).is_retryable(), "{code}");
        }
        for (code, reason) in [
            (404, "NotFound"),
            (403, "Forbidden"),
            (422, "Invalid"),
            (400, "BadRequest"),
        ] {
            assert!(!kube(api_error(code, reason)).is_retryable(), "{code}");
        }
        let err = kube(api_error(503, "ServiceUnavailable")).to_string();
        assert!(
            err.starts_with("reading operation \"x\" in namespace \"y\": "),
            "{err}"
        );
        assert!(!StoreError::Changed("aborted by someone else".into()).is_retryable());
        let conflict = StoreError::Conflict {
            op: "x".into(),
            namespace: "y".into(),
            attempts: MAX_CONFLICTS,
        };
        assert!(conflict.is_retryable());
    }

    #[test]
    fn conflict_pauses_grow_and_stay_bounded() {
        for n in 1..MAX_CONFLICTS {
            let pause = conflict_backoff(n);
            let cap = Duration::from_millis((5u64 << n).min(1000));
            assert!(pause >= cap / 2 && pause <= cap, "{n}: {pause:?}");
        }
        assert!(conflict_backoff(40) <= Duration::from_secs(1));
    }

    #[test]
    fn a_missing_operation_says_how_to_list_them() {
        let err = StoreError::NotFound {
            op: "data-x7k2p".into(),
            namespace: "prod".into(),
        };
        assert_eq!(
            err.to_string(),
            "no operation \"data-x7k2p\" in namespace \"prod\"; \
             list them with: kubectl volmig status -n prod"
        );
    }

    #[test]
    fn records_list_oldest_first_then_by_name() {
        let vm = |name: &str, created: Option<&str>| {
            VolumeMigration {
            api_version: String::new(),
            kind: String::new(),
            metadata: Metadata {
                name: name.into(),
                creation_timestamp: created.map(|t| t.parse().expect("timestamp")),
                ..Metadata::default()
            },
            spec: serde_json::from_value(serde_json::json!({
                "source": {"namespace": "a", "name": "s"},
                "destination": {"namespace": "a", "name": "d"},
                "transfer": {}, "retry": {"backoffLimit": 1, "backoffSeconds": 1},
                "mover": {"image": "i", "cpuRequest": "1", "memoryRequest": "1", "memoryLimit": "1"},
            }))
            .expect("spec"),
            status: MigrationStatus::default(),
        }
        };
        let mut records = vec![
            vm("late", Some("2025-03-01T10:00:00Z")),
            vm("unknown", None),
            vm("b-early", Some("2025-03-01T09:00:00Z")),
            vm("a-early", Some("2025-03-01T09:00:00Z")),
        ];
        sort_records(&mut records);
        let names: Vec<&str> = records.iter().map(|r| r.metadata.name.as_str()).collect();
        assert_eq!(names, ["a-early", "b-early", "late", "unknown"]);
    }
}
