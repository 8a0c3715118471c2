//! The object store: what etcd plus the generic registry of a real API server
//! do. Objects are JSON values keyed by resource, namespace and name; every
//! write takes the next value of one global resourceVersion and is appended
//! to a bounded history that watches replay from (a version older than the
//! history answers 410 Gone, as a compacted etcd does).
//!
//! The HTTP layer and the controllers both write through here, so the rules
//! (defaults, validation, optimistic concurrency, finalizers) hold for both.

mod meta;

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::{json, Value};
use tokio::sync::{broadcast, watch};

use crate::registry::custom::{self, CRD_PLURAL};
use crate::registry::rules::{pod_security, service_accounts};
use crate::registry::{self, Resource, Served, Text};
use crate::status::ApiError;

pub use meta::{controller_uid, generate_suffix, new_uid, remove_owner};

/// The loopback block of a store made without one.
pub const DEFAULT_BLOCK: u8 = 96;

/// Where an object lives. `namespace` is "" for cluster-scoped resources.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Key {
    /// [`Resource::store_key`]: the plural, or a custom resource's
    /// `plural.group`.
    pub resource: Text,
    pub namespace: String,
    pub name: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeType {
    Added,
    Modified,
    Deleted,
}

impl ChangeType {
    /// The watch event `type` field.
    pub fn as_str(self) -> &'static str {
        match self {
            ChangeType::Added => "ADDED",
            ChangeType::Modified => "MODIFIED",
            ChangeType::Deleted => "DELETED",
        }
    }
}

/// One write, as watches see it.
#[derive(Debug, Clone)]
pub struct Change {
    pub kind: ChangeType,
    /// The [`Key::resource`] of the object.
    pub resource: Text,
    pub namespace: String,
    pub rv: u64,
    pub object: Value,
    /// The object before a modification (watches with selectors need both
    /// sides to tell an object leaving their selection).
    pub previous: Option<Value>,
}

/// Which part of an object an update writes: the object (status kept from
/// the stored one, for kinds with a status subresource) or only its status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    Main,
    Status,
}

/// How a DELETE ended.
#[derive(Debug, Clone)]
pub enum Deleted {
    /// The object is gone; this is its last state.
    Gone(Value),
    /// Finalizers or a pod's grace period hold it; it now has a
    /// deletionTimestamp.
    Terminating(Value),
}

/// What a DELETE asks for.
#[derive(Debug, Clone, Default)]
pub struct DeleteOptions {
    /// For pods: seconds before the kubelet kills the containers; `Some(0)`
    /// removes the object at once.
    pub grace_seconds: Option<i64>,
    /// `Orphan` leaves dependents alone (their ownerReferences to this
    /// object are removed); anything else lets the garbage collector
    /// delete them.
    pub orphan: bool,
    /// Precondition: the object's uid.
    pub uid: Option<String>,
    /// Precondition: the object's resourceVersion.
    pub resource_version: Option<String>,
}

/// A watch's start: the changes since its version, then the live stream.
pub struct Subscription {
    pub backlog: Vec<Arc<Change>>,
    pub live: broadcast::Receiver<Arc<Change>>,
    /// The version the watch has seen up to once the backlog is sent.
    pub rv: u64,
    /// Turns true when the store closes (its sandbox is gone): watches end.
    pub closed: watch::Receiver<bool>,
}

pub struct Store {
    inner: Mutex<Inner>,
    changes: broadcast::Sender<Arc<Change>>,
    version: watch::Sender<u64>,
    closed: watch::Sender<bool>,
}

struct Inner {
    objects: BTreeMap<Key, Value>,
    rv: u64,
    history: VecDeque<Arc<Change>>,
    history_limit: usize,
    /// The newest version dropped from the history: watches from before it
    /// are too old.
    compacted: u64,
    /// The sandbox's loopback block `127.B.0.0/16` (Service addresses).
    block: u8,
    /// The custom resources the stored definitions serve, rebuilt with
    /// every write of a definition.
    custom: Arc<custom::Index>,
}

impl Store {
    /// A store that keeps the last `history_limit` changes for watches.
    pub fn new(history_limit: usize) -> Arc<Store> {
        Store::with_block(history_limit, DEFAULT_BLOCK)
    }

    /// A store whose Services get addresses in `127.block.255.0/24`.
    pub fn with_block(history_limit: usize, block: u8) -> Arc<Store> {
        let (changes, _) = broadcast::channel(16_384);
        let (version, _) = watch::channel(0);
        Arc::new(Store {
            inner: Mutex::new(Inner {
                objects: BTreeMap::new(),
                rv: 0,
                history: VecDeque::new(),
                history_limit: history_limit.max(1),
                compacted: 0,
                block,
                custom: Arc::default(),
            }),
            changes,
            version,
            closed: watch::channel(false).0,
        })
    }

    /// Ends every watch (their clients see the stream close and watch
    /// again, finding nobody): for a sandbox that is going away while its
    /// clients may live on.
    pub fn close(&self) {
        self.closed.send_replace(true);
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves plain data behind; keep going.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The sandbox's loopback block `127.B.0.0/16`.
    pub fn block(&self) -> u8 {
        self.lock().block
    }

    /// Turns true when the store closes (its sandbox is gone).
    pub fn subscribe_closed(&self) -> watch::Receiver<bool> {
        self.closed.subscribe()
    }

    /// Resolves each time anything is written: controllers wait on this.
    pub fn subscribe_version(&self) -> watch::Receiver<u64> {
        self.version.subscribe()
    }

    pub fn resource_version(&self) -> u64 {
        self.lock().rv
    }

    /// The custom resource `plural` of `group`/`version`, while a
    /// definition serves it.
    pub fn custom_resource(
        &self,
        group: &str,
        version: &str,
        plural: &str,
    ) -> Option<Arc<Resource>> {
        self.lock().custom.find(group, version, plural)
    }

    /// The custom resources served now, every version of each.
    pub fn custom_resources(&self) -> Arc<custom::Index> {
        self.lock().custom.clone()
    }

    /// The resource whose objects are filed under `key` (a [`Key`]'s
    /// resource): a built-in kind's, or the storage version of a custom
    /// resource still served.
    pub fn resource_for_key(&self, key: &str) -> Option<Served> {
        if let Some(builtin) = registry::RESOURCES.iter().find(|r| r.plural == key) {
            return Some(Served::Builtin(builtin));
        }
        self.lock().custom.storage_of(key).map(Served::Custom)
    }

    pub fn get(&self, res: &Resource, namespace: &str, name: &str) -> Result<Value, ApiError> {
        self.lock().stored(res, &key(res, namespace, name))
    }

    /// Every object of `res` (in `namespace`, or all when None), in name
    /// order, with the version the list is consistent at.
    pub fn list(&self, res: &Resource, namespace: Option<&str>) -> (Vec<Value>, u64) {
        let inner = self.lock();
        let items = inner
            .objects_of(res, namespace)
            .map(|(_, v)| v.clone())
            .collect();
        (items, inner.rv)
    }

    /// Every object of every resource, for the garbage collector.
    pub fn snapshot(&self) -> Vec<(Key, Value)> {
        let inner = self.lock();
        inner
            .objects
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    /// Typed list for the controllers; objects that do not deserialize
    /// (a test wrote something odd) are skipped.
    pub fn list_as<T: serde::de::DeserializeOwned>(&self, plural: &str) -> Vec<T> {
        let (items, _) = self.list(registry::get(plural), None);
        items
            .into_iter()
            .filter_map(|v| serde_json::from_value(v).ok())
            .collect()
    }

    pub fn create(
        &self,
        res: &Resource,
        namespace: &str,
        mut obj: Value,
    ) -> Result<Value, ApiError> {
        let mut inner = self.lock();
        inner.still_served(res)?;
        meta::prepare_create(res, namespace, &mut obj)?;
        registry::prepare_create(res, &mut obj);
        if res.namespaced {
            let ns = key(registry::get("namespaces"), "", namespace);
            match inner.objects.get(&ns) {
                None => return Err(ApiError::not_found("namespaces", namespace)),
                Some(ns) if !ns["metadata"]["deletionTimestamp"].is_null() => {
                    return Err(ApiError::Forbidden(format!(
                        "{} \"{}\" is forbidden: unable to create new content in namespace {namespace} because it is being terminated",
                        res.plural,
                        obj["metadata"]["name"].as_str().unwrap_or_default()
                    )))
                }
                Some(_) => {}
            }
        }
        let default_class = inner.default_class();
        registry::default_object(res, &mut obj, default_class.as_deref());
        registry::admit(res, &mut obj);
        if res.builtin_kind() == "Pod" {
            let accounts = registry::get("serviceaccounts");
            service_accounts::admit_pod(&mut obj, |name| {
                inner.objects.get(&key(accounts, namespace, name)).cloned()
            })?;
        }
        if res.builtin_kind() == "Service" {
            let others: Vec<&Value> = inner.objects_of(res, None).map(|(_, v)| v).collect();
            crate::services::allocation::on_create(inner.block, &mut obj, &others)?;
        }
        registry::validate_create(res, &obj)?;
        // The validating admission plugins run on the object as it would
        // be stored, its name generated.
        match res.builtin_kind() {
            "Pod" => {
                let ns = key(registry::get("namespaces"), "", namespace);
                if let Some(ns) = inner.objects.get(&ns) {
                    pod_security::admit_pod(ns, &obj)?;
                }
            }
            "Namespace" => pod_security::validate_namespace(&obj, None)?,
            _ => {}
        }
        let name = obj["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let key = key(res, namespace, &name);
        if inner.objects.contains_key(&key) {
            // Custom resources are named with their group, as a real
            // server names every resource.
            let kind = match res.custom {
                Some(_) => qualified(res),
                None => res.plural.to_string(),
            };
            return Err(ApiError::AlreadyExists { kind, name });
        }
        Ok(self.commit(&mut inner, key, ChangeType::Added, obj))
    }

    /// PUT: replaces the object (or its status). A resourceVersion in `obj`
    /// that is not the stored one is a 409 Conflict.
    pub fn update(
        &self,
        res: &Resource,
        namespace: &str,
        name: &str,
        obj: Value,
        part: Part,
    ) -> Result<Value, ApiError> {
        let mut inner = self.lock();
        let key = key(res, namespace, name);
        let old = inner.stored(res, &key)?;
        let mut new = meta::prepare_update(res, &old, obj, part)?;
        let default_class = inner.default_class();
        registry::default_object(res, &mut new, default_class.as_deref());
        if res.builtin_kind() == "Service" && part == Part::Main {
            let others: Vec<&Value> = inner
                .objects_of(res, None)
                .filter(|(k, _)| **k != key)
                .map(|(_, v)| v)
                .collect();
            crate::services::allocation::on_update(&old, &mut new, &others)?;
        }
        // A write that changes nothing (once defaulted) is no write: no new
        // version, no watch event.
        if new == old {
            return Ok(old);
        }
        if part == Part::Status {
            registry::rules::validate_status(res, &new)?;
        }
        if part == Part::Main {
            registry::validate_update(res, &old, &new)?;
            match res.builtin_kind() {
                "Pod" if pod_security::significant_update(&old, &new) => {
                    let ns = self::key(registry::get("namespaces"), "", namespace);
                    if let Some(ns) = inner.objects.get(&ns) {
                        pod_security::admit_pod(ns, &new)?;
                    }
                }
                "Namespace" => pod_security::validate_namespace(&new, Some(&old))?,
                _ => {}
            }
        }
        Ok(self.write(&mut inner, key, new))
    }

    /// Read-modify-write without a conflict window, for the controllers.
    /// `edit` returns false to leave the object alone.
    pub fn modify(
        &self,
        res: &Resource,
        namespace: &str,
        name: &str,
        edit: impl FnOnce(&mut Value) -> bool,
    ) -> Result<Value, ApiError> {
        let mut inner = self.lock();
        let key = key(res, namespace, name);
        let old = inner.stored(res, &key)?;
        let mut new = old.clone();
        if !edit(&mut new) || new == old {
            return Ok(old);
        }
        meta::bump_generation(&old, &mut new);
        Ok(self.write(&mut inner, key, new))
    }

    /// Makes `owner` (an object of `owner_res` in `namespace`) the
    /// controller of an orphan, as `ControllerRefManager.AdoptPod` does
    /// after `RecheckDeletionTimestamp`: only while the owner exists with
    /// that uid and is not being deleted, and the object has no controller
    /// and is not being deleted either. All under one lock, so an owner
    /// deleted with Orphan propagation never gets its orphans back. None
    /// when nothing was adopted.
    pub fn adopt(
        &self,
        res: &Resource,
        namespace: &str,
        name: &str,
        owner_res: &Resource,
        owner: &Value,
        reference: Value,
    ) -> Result<Option<Value>, ApiError> {
        let mut inner = self.lock();
        let owner_name = owner["metadata"]["name"].as_str().unwrap_or_default();
        let live = inner
            .objects
            .get(&key(owner_res, namespace, owner_name))
            .is_some_and(|o| {
                o["metadata"]["uid"] == owner["metadata"]["uid"]
                    && o["metadata"]["deletionTimestamp"].is_null()
            });
        let key = key(res, namespace, name);
        let old = inner.stored(res, &key)?;
        if !live
            || meta::controller_uid(&old).is_some()
            || !old["metadata"]["deletionTimestamp"].is_null()
        {
            return Ok(None);
        }
        let mut new = old.clone();
        match new["metadata"]["ownerReferences"].as_array_mut() {
            Some(refs) => refs.push(reference),
            None => new["metadata"]["ownerReferences"] = json!([reference]),
        }
        Ok(Some(self.write(&mut inner, key, new)))
    }

    pub fn delete(
        &self,
        res: &Resource,
        namespace: &str,
        name: &str,
        opts: &DeleteOptions,
    ) -> Result<Deleted, ApiError> {
        let mut inner = self.lock();
        let key = key(res, namespace, name);
        let old = inner.stored(res, &key)?;
        meta::check_preconditions(res, &old, opts)?;
        if opts.orphan {
            inner.orphan_dependents(self, &old);
        }
        let mut obj = old.clone();
        match meta::deletion(res, &mut obj, opts) {
            meta::Deletion::Now => Ok(Deleted::Gone(self.remove(&mut inner, key, obj))),
            meta::Deletion::Held => {
                if obj == old {
                    return Ok(Deleted::Terminating(old));
                }
                Ok(Deleted::Terminating(self.write(&mut inner, key, obj)))
            }
        }
    }

    /// Starts a watch of `res` (in `namespace` or all) after version `since`;
    /// None starts with a synthetic ADDED for every current object.
    pub fn watch(
        &self,
        res: &Resource,
        namespace: Option<&str>,
        since: Option<u64>,
    ) -> Result<Subscription, ApiError> {
        let inner = self.lock();
        let resource = res.store_key();
        let wanted =
            |c: &Change| c.resource == resource && namespace.is_none_or(|ns| c.namespace == ns);
        let backlog = match since {
            Some(since) if since < inner.compacted => {
                return Err(ApiError::Gone(format!(
                    "too old resource version: {since} ({})",
                    inner.compacted + 1
                )))
            }
            Some(since) => inner
                .history
                .iter()
                .filter(|c| c.rv > since && wanted(c))
                .cloned()
                .collect(),
            None => inner
                .objects_of(res, namespace)
                .map(|(k, v)| {
                    Arc::new(Change {
                        kind: ChangeType::Added,
                        resource: resource.clone(),
                        namespace: k.namespace.clone(),
                        rv: inner.rv,
                        object: v.clone(),
                        previous: None,
                    })
                })
                .collect(),
        };
        Ok(Subscription {
            backlog,
            live: self.changes.subscribe(),
            rv: inner.rv.max(since.unwrap_or(0)),
            closed: self.closed.subscribe(),
        })
    }

    /// Stores `obj` under a new version (Added when new, else Modified), and
    /// removes it instead when it is terminating and its last finalizer went.
    fn write(&self, inner: &mut Inner, key: Key, obj: Value) -> Value {
        let terminating = !obj["metadata"]["deletionTimestamp"].is_null();
        if terminating && !meta::still_held(&key.resource, &obj) {
            return self.remove(inner, key, obj);
        }
        self.commit(inner, key, ChangeType::Modified, obj)
    }

    /// Removes the object, publishing its last state under a new version.
    fn remove(&self, inner: &mut Inner, key: Key, mut obj: Value) -> Value {
        inner.objects.remove(&key);
        inner.reindex_if_definition(&key);
        let rv = inner.next_rv();
        obj["metadata"]["resourceVersion"] = json!(rv.to_string());
        self.publish(inner, ChangeType::Deleted, key, rv, obj.clone(), None);
        obj
    }

    fn commit(&self, inner: &mut Inner, key: Key, kind: ChangeType, mut obj: Value) -> Value {
        let rv = inner.next_rv();
        obj["metadata"]["resourceVersion"] = json!(rv.to_string());
        let previous = inner.objects.insert(key.clone(), obj.clone());
        inner.reindex_if_definition(&key);
        self.publish(inner, kind, key, rv, obj.clone(), previous);
        obj
    }

    fn publish(
        &self,
        inner: &mut Inner,
        kind: ChangeType,
        key: Key,
        rv: u64,
        object: Value,
        previous: Option<Value>,
    ) {
        let change = Arc::new(Change {
            kind,
            resource: key.resource,
            namespace: key.namespace,
            rv,
            object,
            previous,
        });
        inner.history.push_back(change.clone());
        while inner.history.len() > inner.history_limit {
            if let Some(dropped) = inner.history.pop_front() {
                inner.compacted = dropped.rv;
            }
        }
        // No receivers is fine: nobody is watching.
        let _ = self.changes.send(change);
        self.version.send_replace(rv);
    }
}

impl Inner {
    /// After a write of a CustomResourceDefinition: the custom resources
    /// served now.
    fn reindex_if_definition(&mut self, key: &Key) {
        if key.resource == CRD_PLURAL {
            let definitions = self
                .objects
                .iter()
                .filter(|(k, _)| k.resource == CRD_PLURAL)
                .map(|(_, v)| v);
            self.custom = Arc::new(custom::Index::build(definitions));
        }
    }

    /// For a custom resource, that its definition still serves it and is
    /// not being deleted (it may have changed since the request found it).
    fn still_served(&self, res: &Resource) -> Result<(), ApiError> {
        if res.custom.is_none() {
            return Ok(());
        }
        match self.custom.find(&res.group, &res.version, &res.plural) {
            None => Err(ApiError::NoRoute(format!(
                "the server could not find the requested resource ({})",
                qualified(res)
            ))),
            Some(now) if now.custom.as_ref().is_some_and(|d| d.terminating) => {
                Err(ApiError::NotAllowed(
                    "create not allowed while custom resource definition is terminating".into(),
                ))
            }
            Some(_) => Ok(()),
        }
    }

    /// The object at `key` (of `res`), or a 404 naming it.
    fn stored(&self, res: &Resource, key: &Key) -> Result<Value, ApiError> {
        self.objects
            .get(key)
            .cloned()
            .ok_or_else(|| not_found(res, &key.name))
    }

    /// The objects of `res`, in `namespace` or all, in key order.
    fn objects_of<'a>(
        &'a self,
        res: &'a Resource,
        namespace: Option<&'a str>,
    ) -> impl Iterator<Item = (&'a Key, &'a Value)> + 'a {
        let resource = res.store_key();
        self.objects.iter().filter(move |(k, _)| {
            k.resource == resource && namespace.is_none_or(|ns| k.namespace == ns)
        })
    }

    fn next_rv(&mut self) -> u64 {
        self.rv += 1;
        self.rv
    }

    /// The class the DefaultStorageClass admission plugin assigns.
    fn default_class(&self) -> Option<String> {
        self.objects
            .iter()
            .filter(|(k, _)| k.resource == "storageclasses")
            .find(|(_, v)| {
                v["metadata"]["annotations"]["storageclass.kubernetes.io/is-default-class"]
                    == json!("true")
            })
            .map(|(k, _)| k.name.clone())
    }

    /// Removes ownerReferences to `owner` from every object that has one.
    fn orphan_dependents(&mut self, store: &Store, owner: &Value) {
        let uid = owner["metadata"]["uid"].clone();
        let keys: Vec<Key> = self
            .objects
            .iter()
            .filter(|(_, v)| meta::owner_uids(v).any(|u| *u == uid))
            .map(|(k, _)| k.clone())
            .collect();
        for key in keys {
            let Some(mut obj) = self.objects.get(&key).cloned() else {
                continue;
            };
            meta::remove_owner(&mut obj, &uid);
            store.commit(self, key, ChangeType::Modified, obj);
        }
    }
}

fn key(res: &Resource, namespace: &str, name: &str) -> Key {
    Key {
        resource: res.store_key(),
        namespace: if res.namespaced {
            namespace.to_string()
        } else {
            String::new()
        },
        name: name.to_string(),
    }
}

fn not_found(res: &Resource, name: &str) -> ApiError {
    ApiError::not_found(&qualified(res), name)
}

/// The 409 an update with a stale resourceVersion gets.
pub fn stale(res: &Resource, name: &str) -> ApiError {
    ApiError::Conflict(format!(
        "Operation cannot be fulfilled on {} \"{name}\": the object has been modified; please apply your changes to the latest version and try again",
        qualified(res)
    ))
}

/// `pods`, `deployments.apps`: how a real server names a resource in errors.
pub fn qualified(res: &Resource) -> String {
    if res.group.is_empty() {
        res.plural.to_string()
    } else {
        format!("{}.{}", res.plural, res.group)
    }
}

#[cfg(test)]
mod tests;
